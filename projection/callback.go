package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// Callback is a message's outcome callback: a POST to its callback URL
// each time the message settles, made as a job of the callback worker. Its
// state is a delivery's: queued when the message settles, delivering
// while a call is claimed, retrying after a call that failed for now,
// delivered or failed at last; empty before the first settlement.
type Callback struct {
	MessageID uuid.UUID
	URL       string
	// Seq counts the message's settlements, from 1: each makes the
	// callback queued afresh, with what it is to say.
	Seq int
	// Status, SettledAt and Deliveries are the message as it settled:
	// what the call says.
	Status     lifecycle.MessageStatus
	SettledAt  time.Time
	Deliveries []CallbackDelivery
	State      lifecycle.DeliveryState
	// Attempts counts the calls of this settlement that started.
	Attempts   int
	NextDue    time.Time
	ClaimToken uuid.UUID
	LeaseEnd   time.Time
	LastError  string
	UpdatedAt  time.Time
	FinishedAt time.Time
}

// CallbackDelivery is a delivery as its message settled.
type CallbackDelivery struct {
	Target    string                  `json:"target"`
	State     lifecycle.DeliveryState `json:"state"`
	LastError string                  `json:"last_error"`
}

// Facts are the fields the lifecycle's rules read.
func (c *Callback) Facts() lifecycle.Facts {
	return lifecycle.Facts{State: c.State, NextDue: c.NextDue, LeaseEnd: c.LeaseEnd}
}

// armCallback makes the message's callback queued, due at once, when the
// message has a callback URL and settled by the event at at: its status
// was was, which is not settled, and is now settled. What it says is the
// current generation's deliveries (those a resend superseded are past). A settlement of a
// message whose earlier callback is not made yet replaces it: the
// receiver is told the latest outcome.
func (m *Message) armCallback(was lifecycle.MessageStatus, at time.Time) {
	if m.Callback == nil || was.Settled() || !m.Status.Settled() {
		return
	}
	cb := Callback{MessageID: m.ID, URL: m.Callback.URL, Seq: m.Callback.Seq + 1, Status: m.Status, SettledAt: at,
		Deliveries: make([]CallbackDelivery, 0, len(m.Deliveries)), State: lifecycle.StateQueued, NextDue: at, UpdatedAt: at}
	for i := range m.Deliveries {
		if d := &m.Deliveries[i]; m.Current(d) {
			cb.Deliveries = append(cb.Deliveries, CallbackDelivery{Target: d.Target, State: d.State, LastError: d.LastError})
		}
	}
	m.Callback = &cb
}

// callbackStep folds a callback event into next, a copy of the state, as
// deliveryStep folds a delivery event into a delivery.
func callbackStep(next *Message, e *journal.Event) error {
	at := e.RecordedAt
	if next.Callback == nil || next.Callback.State == "" {
		return &IllegalError{Kind: e.Kind(), State: string(next.Stage), Reason: "the message has no callback to make"}
	}
	cb := *next.Callback
	illegal := func(reason string, allowed ...lifecycle.DeliveryState) error {
		return &IllegalError{Kind: e.Kind(), State: string(cb.State), Allowed: lifecycle.Strings(allowed), Reason: reason}
	}
	claimed := func(seq int, token uuid.UUID) error {
		switch {
		case seq != cb.Seq:
			return illegal(fmt.Sprintf("callback %d, but the message's is %d", seq, cb.Seq))
		case cb.State != lifecycle.StateDelivering:
			return illegal("the callback is not claimed", lifecycle.StateDelivering)
		case token != cb.ClaimToken:
			return illegal("the claim token is not the current claim's")
		}
		return nil
	}
	switch p := e.Payload.(type) {
	case *journal.CallbackClaimed:
		r := lifecycle.CallbackClaimRule
		switch {
		case p.Seq != cb.Seq:
			return illegal(fmt.Sprintf("callback %d, but the message's is %d", p.Seq, cb.Seq))
		case !r.Admits(cb.State):
			return illegal("only a queued or retrying callback is claimed", r.States()...)
		case !r.Holds(cb.Facts(), at):
			return illegal("not due until " + stamp(cb.NextDue))
		case p.Attempt != cb.Attempts+1:
			return illegal(fmt.Sprintf("call %d does not follow %d", p.Attempt, cb.Attempts))
		case !p.LeaseEnd.After(at):
			return illegal("the lease ends before it starts")
		}
		cb.State, cb.Attempts, cb.ClaimToken, cb.LeaseEnd, cb.NextDue = lifecycle.StateDelivering, p.Attempt, p.Token, p.LeaseEnd, time.Time{}
	case *journal.CallbackAttempted:
		if err := claimed(p.Seq, p.Token); err != nil {
			return err
		}
		if p.Attempt != cb.Attempts {
			return illegal(fmt.Sprintf("outcome of call %d, but the claim is call %d", p.Attempt, cb.Attempts))
		}
		o := p.Outcome
		cb.State, cb.ClaimToken, cb.LeaseEnd = o.State(), uuid.Nil, time.Time{}
		switch o.Kind {
		case lifecycle.OutcomeDelivered:
			cb.LastError, cb.FinishedAt = "", at
		case lifecycle.OutcomeRetry:
			cb.LastError, cb.NextDue = o.Text, o.RetryAt
		case lifecycle.OutcomeFailed:
			cb.LastError, cb.FinishedAt = o.Text, at
		default:
			return illegal("a callback awaits no receipt")
		}
	case *journal.CallbackReleased:
		if err := claimed(p.Seq, p.Token); err != nil {
			return err
		}
		cb.State, cb.ClaimToken, cb.LeaseEnd, cb.NextDue = lifecycle.StateQueued, uuid.Nil, time.Time{}, at
		if p.Started {
			cb.State = lifecycle.StateRetrying
		} else {
			cb.Attempts--
		}
	case *journal.CallbackLeaseExpired:
		if err := claimed(p.Seq, p.Token); err != nil {
			return err
		}
		switch {
		case !p.LeaseEnd.Equal(cb.LeaseEnd):
			return illegal("the lease recorded is not the claim's")
		case !lifecycle.LeaseExpiryRule.Holds(cb.Facts(), at):
			return illegal("the lease runs until " + stamp(cb.LeaseEnd))
		}
		cb.State, cb.ClaimToken, cb.LeaseEnd, cb.NextDue = lifecycle.StateRetrying, uuid.Nil, time.Time{}, at
		cb.LastError = "call interrupted: lease expired"
	}
	cb.UpdatedAt = at
	next.Callback = &cb
	return nil
}

// callbackColumns are a callbacks row, read; as the messages' reads join
// it with LEFT JOIN, a message with no callback reads a row whose
// message_id is NULL, and the columns a Callback holds as plain values
// are coalesced.
const callbackColumns = `c.message_id, coalesce(c.url, ''), coalesce(c.seq, 0), coalesce(c.status, ''), c.settled_at,
	c.deliveries, coalesce(c.state, ''), coalesce(c.attempts, 0), c.next_due, c.claim_token, c.lease_end,
	coalesce(c.last_error, ''), c.updated_at, c.finished_at`

// callbackRow scans a callbacks row.
type callbackRow struct {
	cb                                                  Callback
	messageID, token                                    pgtype.UUID
	deliveries                                          []byte
	settledAt, nextDue, leaseEnd, finishedAt, updatedAt pgtype.Timestamptz
}

func (r *callbackRow) scanDest() []any {
	c := &r.cb
	return []any{&r.messageID, &c.URL, &c.Seq, &c.Status, &r.settledAt, &r.deliveries, &c.State, &c.Attempts,
		&r.nextDue, &r.token, &r.leaseEnd, &c.LastError, &r.updatedAt, &r.finishedAt}
}

func (r *callbackRow) callback() (*Callback, error) {
	c := r.cb
	c.MessageID = r.messageID.Bytes
	c.SettledAt, c.NextDue, c.LeaseEnd, c.FinishedAt = timeOf(r.settledAt), timeOf(r.nextDue), timeOf(r.leaseEnd), timeOf(r.finishedAt)
	c.ClaimToken, c.UpdatedAt = r.token.Bytes, timeOf(r.updatedAt)
	if r.deliveries != nil {
		if err := json.Unmarshal(r.deliveries, &c.Deliveries); err != nil {
			return nil, fmt.Errorf("read callback of message %s: %w", c.MessageID, err)
		}
	}
	return &c, nil
}

// callbackColumnsOf holds callbacks column by column, for unnest.
type callbackColumnsOf struct {
	messageID, token                          []pgtype.UUID
	url, status, deliveries, state, lastError []pgtype.Text
	seq, attempts                             []int32
	settledAt, nextDue, leaseEnd, finishedAt  []pgtype.Timestamptz
	updatedAt                                 []time.Time
}

func (c *callbackColumnsOf) add(cb *Callback) {
	var deliveries pgtype.Text
	if cb.Deliveries != nil {
		data, _ := json.Marshal(cb.Deliveries) // plain strings: cannot fail
		deliveries = pgtype.Text{String: string(data), Valid: true}
	}
	c.messageID = append(c.messageID, pgUUID(cb.MessageID))
	c.url = append(c.url, pgtype.Text{String: cb.URL, Valid: true})
	c.seq = append(c.seq, int32(cb.Seq))
	c.status = append(c.status, pgText(string(cb.Status)))
	c.settledAt = append(c.settledAt, pgTime(cb.SettledAt))
	c.deliveries = append(c.deliveries, deliveries)
	c.state = append(c.state, pgText(string(cb.State)))
	c.attempts = append(c.attempts, int32(cb.Attempts))
	c.nextDue = append(c.nextDue, pgTime(cb.NextDue))
	c.token = append(c.token, pgUUID(cb.ClaimToken))
	c.leaseEnd = append(c.leaseEnd, pgTime(cb.LeaseEnd))
	c.lastError = append(c.lastError, pgtype.Text{String: cb.LastError, Valid: true})
	c.updatedAt = append(c.updatedAt, cb.UpdatedAt)
	c.finishedAt = append(c.finishedAt, pgTime(cb.FinishedAt))
}

const upsertCallbacksSQL = `INSERT INTO callbacks (message_id, url, seq, status, settled_at, deliveries, state, attempts,
	next_due, claim_token, lease_end, last_error, updated_at, finished_at)
	SELECT m, u, s, st, sa, d::jsonb, state, a, nd, t, le, err, ua, fa FROM unnest($1::uuid[], $2::text[], $3::int[],
		$4::text[], $5::timestamptz[], $6::text[], $7::text[], $8::int[], $9::timestamptz[], $10::uuid[],
		$11::timestamptz[], $12::text[], $13::timestamptz[], $14::timestamptz[])
		AS c(m, u, s, st, sa, d, state, a, nd, t, le, err, ua, fa)
	ON CONFLICT (message_id) DO UPDATE SET seq = excluded.seq, status = excluded.status,
		settled_at = excluded.settled_at, deliveries = excluded.deliveries, state = excluded.state,
		attempts = excluded.attempts, next_due = excluded.next_due, claim_token = excluded.claim_token,
		lease_end = excluded.lease_end, last_error = excluded.last_error, updated_at = excluded.updated_at,
		finished_at = excluded.finished_at`

// queueCallbacks queues the upsert of the callbacks the writes changed.
func queueCallbacks(b *pgx.Batch, writes []Write) {
	var c callbackColumnsOf
	for _, w := range writes {
		cb := w.Message.Callback
		if cb == nil || w.Before != nil && w.Before.Callback != nil && sameCallback(w.Before.Callback, cb) {
			continue
		}
		c.add(cb)
	}
	if len(c.messageID) == 0 {
		return
	}
	b.Queue(upsertCallbacksSQL, c.messageID, c.url, c.seq, c.status, c.settledAt, c.deliveries, c.state, c.attempts,
		c.nextDue, c.token, c.leaseEnd, c.lastError, c.updatedAt, c.finishedAt)
}

// sameCallback is diffFields(a, b) finding nothing, without reflection.
// TestSameFieldsCoverEveryField keeps it in step with Callback.
func sameCallback(a, b *Callback) bool {
	return a.MessageID == b.MessageID && a.URL == b.URL && a.Seq == b.Seq && a.Status == b.Status &&
		a.SettledAt.Equal(b.SettledAt) && slices.Equal(a.Deliveries, b.Deliveries) && (a.Deliveries == nil) == (b.Deliveries == nil) &&
		a.State == b.State && a.Attempts == b.Attempts && a.NextDue.Equal(b.NextDue) && a.ClaimToken == b.ClaimToken &&
		a.LeaseEnd.Equal(b.LeaseEnd) && a.LastError == b.LastError && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.FinishedAt.Equal(b.FinishedAt)
}

// readCallbacks compares the stored callbacks of a share with the fold.
func (c *tableCheck) readCallbacks(ctx context.Context, q journal.Querier, sh share) error {
	var r callbackRow
	dest := r.scanDest()
	where := strings.ReplaceAll(sh.messages, "m.id", "c.message_id")
	return scanRows(ctx, q, `SELECT `+callbackColumns+` FROM callbacks c`+where, sh.args, func(rows pgx.Rows) error {
		r = callbackRow{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		got, err := r.callback()
		if err != nil {
			return err
		}
		c.callbacks[got.MessageID] = struct{}{}
		m := c.f.Messages[got.MessageID]
		switch {
		case m == nil:
			c.violations = append(c.violations, Violation{MessageID: got.MessageID, Problem: "callback in the callbacks table of no message in the journal"})
		case m.Callback == nil:
			c.violations = append(c.violations, Violation{MessageID: got.MessageID, Problem: "callback in the callbacks table but not in the journal"})
		case !sameCallback(got, m.Callback):
			for _, p := range diffFields(*got, *m.Callback) {
				c.violations = append(c.violations, Violation{MessageID: got.MessageID, Problem: "callback " + p})
			}
		}
		return nil
	})
}

var callbackCopyColumns = []string{"message_id", "url", "seq", "status", "settled_at", "deliveries", "state", "attempts",
	"next_due", "claim_token", "lease_end", "last_error", "updated_at", "finished_at"}

// copyCallbacks loads the callbacks of messages, in their order, into the
// callbacks table (see copyIn for freeze).
func copyCallbacks(ctx context.Context, tx pgx.Tx, messages []*Message, freeze bool) error {
	i := 0
	return copyIn(ctx, tx, "callbacks", callbackCopyColumns, freeze, func(b *copyRow) bool {
		for i < len(messages) && messages[i].Callback == nil {
			i++
		}
		if i == len(messages) {
			return false
		}
		cb := messages[i].Callback
		i++
		b.begin(len(callbackCopyColumns))
		b.uuid(cb.MessageID)
		b.text(cb.URL)
		b.int4(cb.Seq)
		b.nullText(string(cb.Status))
		b.nullTime(cb.SettledAt)
		if cb.Deliveries == nil {
			b.null()
		} else {
			data, _ := json.Marshal(cb.Deliveries)
			b.jsonb(data)
		}
		b.nullText(string(cb.State))
		b.int4(cb.Attempts)
		b.nullTime(cb.NextDue)
		b.nullUUID(cb.ClaimToken)
		b.nullTime(cb.LeaseEnd)
		b.text(cb.LastError)
		b.time(cb.UpdatedAt)
		b.nullTime(cb.FinishedAt)
		return true
	})
}
