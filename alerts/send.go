package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/targets"
)

const (
	// sendTimeout bounds one send: a NATS flush or a webhook request.
	sendTimeout = 10 * time.Second
	// maxBackoff caps the wait between failed sends.
	maxBackoff = time.Minute
	// rescan is how often an idle send loop looks for unsent alerts anyway:
	// those another process recorded and left, or a lost wake-up.
	rescan = time.Minute
	// sendBatch is how many unsent alerts one query takes.
	sendBatch = 100
)

// errBusy says another process holds the channel's send lock.
var errBusy = errors.New("another process is sending")

// channel is one way out for alerts, with the SQL of its column.
type channel struct {
	name string
	// lease is held by the send loop while it sends: one loop per channel
	// sends at a time, whatever the number of processes, so two of them
	// never send the same alert at once.
	lease *schema.Lease
	// pending selects the unsent alerts in journal order; mark sets one sent.
	pending string
	mark    string
	send    func(ctx context.Context, p pending) error
	wake    chan struct{}
	// unmarked is the alert the loop sent and could not mark (the database
	// went away in between): when it comes up again, unsent, it is marked
	// without being sent again. Only the channel's loop touches it.
	unmarked string
}

// pending is an alert a channel owes.
type pending struct {
	id   string
	code Code
	body []byte
}

// lease makes the lease of a channel's send loop.
func (a *Alerter) lease(key schema.LockKey, loop string) *schema.Lease {
	return schema.NewLease(a.db, key, loop, a.log, a.metrics)
}

func (a *Alerter) natsChannel() *channel {
	return &channel{
		name:    "nats",
		lease:   a.lease(schema.KeyAlertsNATS, "alerts_nats"),
		pending: `SELECT id, code, body FROM alerts WHERE nats_sent_at IS NULL ORDER BY position, id LIMIT $1`,
		mark:    `UPDATE alerts SET nats_sent_at = $2 WHERE id = $1`,
		send: func(ctx context.Context, p pending) error {
			body := p.body
			if fits := room(a.nc, p.id); len(body) > fits {
				var err error
				if body, err = cutAlert(body, fits); err != nil {
					return fmt.Errorf("cut alert %s to fit NATS: %w", p.id, err)
				}
				a.log.Warn("alert too big for NATS, published with its texts cut", "id", p.id, "code", p.code,
					"bytes", len(p.body), "max_payload", a.nc.MaxPayload())
			}
			if err := publish(a.nc, "waybill.alerts."+string(p.code), p.id, body); err != nil {
				return err
			}
			return flush(ctx, a.nc)
		},
		wake: make(chan struct{}, 1),
	}
}

func (a *Alerter) webhookChannel() *channel {
	return &channel{
		name:    "webhook",
		lease:   a.lease(schema.KeyAlertsWebhook, "alerts_webhook"),
		pending: `SELECT id, code, body FROM alerts WHERE webhook AND webhook_sent_at IS NULL ORDER BY position, id LIMIT $1`,
		mark:    `UPDATE alerts SET webhook_sent_at = $2 WHERE id = $1`,
		send:    a.post,
		wake:    make(chan struct{}, 1),
	}
}

// sendLoop sends what the channel owes at start, when an alert is recorded,
// and every rescan; after a failure it waits its back-off, ignoring wakes,
// since the channel is likely still down.
func (a *Alerter) sendLoop(ctx context.Context, ch *channel) {
	var backoff time.Duration
	for {
		err := a.sendPending(ctx, ch)
		if ctx.Err() != nil {
			return
		}
		wait, wake := rescan, ch.wake
		if err != nil {
			backoff = min(max(2*backoff, a.backoff), maxBackoff)
			wait, wake = backoff, nil
			if !errors.Is(err, errBusy) {
				a.log.Warn("alert send failed; retrying", "channel", ch.name, "in", backoff, "err", err)
			}
		} else {
			backoff = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// sendPending sends the channel's unsent alerts in journal order, marking
// each as it goes, and stops at the first failure so none overtakes another.
// It holds the channel's lock on one connection, which the marks use too.
func (a *Alerter) sendPending(ctx context.Context, ch *channel) error {
	mine, err := ch.lease.Take(ctx)
	if err != nil {
		return fmt.Errorf("send alerts by %s: %w", ch.name, err)
	}
	if !mine {
		return errBusy
	}
	defer ch.lease.Release()
	conn := ch.lease.Conn()
	for {
		rows, _ := conn.Query(ctx, ch.pending, sendBatch)
		batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
			var p pending
			err := r.Scan(&p.id, &p.code, &p.body)
			return p, err
		})
		if err != nil {
			return fmt.Errorf("send alerts by %s: read: %w", ch.name, err)
		}
		for _, p := range batch {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := a.sendOne(ctx, conn, ch, p); err != nil {
				return err
			}
		}
		if len(batch) < sendBatch {
			return nil
		}
	}
}

// sendOne sends one alert and marks it sent. A stop lets both finish (on a
// context of their own). A mark that fails is tried again in the next
// round, without sending the alert again; so only a crash between the send
// and the mark, or another process taking the channel over meanwhile,
// sends an alert again, with its id.
func (a *Alerter) sendOne(ctx context.Context, conn *pgxpool.Conn, ch *channel, p pending) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*sendTimeout)
	defer cancel()
	if ch.unmarked != p.id {
		if err := ch.send(ctx, p); err != nil {
			a.failed.WithLabelValues(ch.name).Inc()
			return fmt.Errorf("send alert %s by %s: %w", p.id, ch.name, err)
		}
		ch.unmarked = p.id
	}
	if _, err := conn.Exec(ctx, ch.mark, p.id, a.now()); err != nil {
		return fmt.Errorf("mark alert %s sent by %s: %w", p.id, ch.name, err)
	}
	ch.unmarked = ""
	return nil
}

// post sends an alert to the webhook, signed by Standard Webhooks with
// the alert's id as the webhook-id: a 2xx answer takes it.
func (a *Alerter) post(ctx context.Context, p pending) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.webhook, bytes.NewReader(p.body))
	if err != nil {
		return err
	}
	var keys []targets.Key
	if a.keys != nil {
		if keys, err = a.keys(ctx); err != nil {
			return fmt.Errorf("the webhook's signing keys: %w", err)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", p.id)
	targets.SignHeaders(req.Header, keys, p.id, a.now(), p.body)
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// cutText is the most bytes of an alert's summary and of each text of its
// details that cutAlert tries first: a 1 KiB start of an error says what
// went wrong, and the whole is in the journal.
const cutText = 1024

// cutAlert is the alert body with Truncated set, its summary and the texts
// of its details cut to cutText bytes each, or to half of that, and so on,
// until it fits room: an alert the server refuses whole would hold back
// every alert after it on the channel.
func cutAlert(body []byte, room int) ([]byte, error) {
	var al Alert
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&al); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	for n := cutText; n >= len(lifecycle.CutMark); n /= 2 {
		cut := al
		cut.Truncated = true
		cut.Summary = lifecycle.Cut(al.Summary, n)
		cut.Details = make(map[string]any, len(al.Details))
		for k, v := range al.Details {
			if text, ok := v.(string); ok {
				v = lifecycle.Cut(text, n)
			}
			cut.Details[k] = v
		}
		data, err := plainjson.Marshal(cut)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		if len(data) <= room {
			return data, nil
		}
	}
	return nil, fmt.Errorf("it does not fit in %d bytes with its texts cut", room)
}

// headerRoom is what a message's header takes but for the value of its
// Nats-Msg-Id: NATS/1.0, the name and the line ends, 27 bytes, and some
// to spare.
const headerRoom = 64

// room is the most data a message with id as its Nats-Msg-Id may carry on
// nc, whose max payload counts the header too. A connection that has not
// met a server yet knows no max (0): room is then unbounded, as the
// client's own check is skipped then too.
func room(nc *nats.Conn, id string) int {
	limit := nc.MaxPayload()
	if limit <= 0 {
		return math.MaxInt
	}
	return int(limit) - headerRoom - len(id)
}

// publish queues data for subject with id as Nats-Msg-Id; flush then
// waits for the server to have it.
func publish(nc *nats.Conn, subject, id string, data []byte) error {
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, id)
	if err := nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// flush waits for the server to have what was published: a round trip
// behind the messages.
func flush(ctx context.Context, nc *nats.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats flush: %w", err)
	}
	return nil
}

// Prune deletes up to limit alerts raised before before that every
// channel they were owed to has taken, and whose events the alerter's
// saved place has passed, oldest first, and reports how many it deleted.
// A sent alert is kept only so that its event, handled again after a crash
// of the alerter, raises nothing twice; an alert still owed stays until it
// is sent. Its raised_at is its event's time, not when the alerter handled
// it, and the feed saves a place only when a whole read commits: so an
// alert whose event is after that place, which the alerter may handle
// again, stays whatever its age, and while the alerter has no place every
// alert does. Retention calls it.
func Prune(ctx context.Context, conn *pgxpool.Conn, before time.Time, limit int) (int, error) {
	places, err := feed.Places(ctx, conn)
	if err != nil {
		return 0, fmt.Errorf("prune alerts: %w", err)
	}
	// The place was saved without waiting for its flush (feed.md), but
	// its commit precedes this deletion's in the WAL, so a crash that
	// loses the place loses the deletion too.
	place, ok := places[AlerterGroup]
	if !ok {
		return 0, nil
	}
	tag, err := conn.Exec(ctx, `DELETE FROM alerts WHERE id IN (
		SELECT id FROM alerts a
		WHERE raised_at < $1 AND nats_sent_at IS NOT NULL AND (NOT webhook OR webhook_sent_at IS NOT NULL)
			AND NOT `+journal.AheadSQL("a.position", "$3::text::xid8", "$4")+`
		ORDER BY raised_at LIMIT $2)`, before, limit, strconv.FormatUint(place.TxID, 10), place.Position)
	if err != nil {
		return 0, fmt.Errorf("prune alerts raised before %s: %w", before.Format(time.RFC3339), err)
	}
	return int(tag.RowsAffected()), nil
}
