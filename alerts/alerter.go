package alerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/targets"
)

// AlerterGroup is the alerter's consumer group in the feed.
const AlerterGroup = "alerts"

// Config configures an Alerter.
type Config struct {
	// DB is the database, on which schema.Ensure has run; required.
	DB *pgxpool.Pool
	// NATS publishes the alerts; required.
	NATS *nats.Conn
	// WebhookURL, when set, receives by POST every alert raised while it is
	// set. Alerts raised without it are never posted.
	WebhookURL string
	// WebhookKeys, when set, gives the keys that sign the webhook's
	// requests now (commands.Writer.OwnKeys of lifecycle.KeyOwnerAlerts;
	// none when alerts.signing.scheme is none). Start asks for them once,
	// so that the key is made at a server's start.
	WebhookKeys func(context.Context) ([]targets.Key, error)
	// SendBackoff is the wait after a failed send; it doubles with every
	// further failure, up to a minute. Default 1 s.
	SendBackoff time.Duration
	// PollInterval is the feed's; see feed.Config.
	PollInterval time.Duration
	// Metrics, when not nil, gets the alerter's counters and its feed lag
	// while it runs.
	Metrics prometheus.Registerer
	// Base's clock stamps the sends and measures the feed's lag.
	service.Base
}

// Alerter raises alerts from the journal and sends them.
type Alerter struct {
	db      *pgxpool.Pool
	nc      *nats.Conn
	webhook string
	keys    func(context.Context) ([]targets.Key, error)
	http    *http.Client
	backoff time.Duration
	metrics prometheus.Registerer
	now     func() time.Time
	log     *slog.Logger

	consumer *feed.Consumer
	// states holds, by stream, the state after the last event the handler
	// folded, so the next event of the stream folds on it without reading
	// the stream again. Only the consumer's goroutine touches it.
	states   map[string]*projection.Message
	raised   *prometheus.CounterVec
	failed   *prometheus.CounterVec
	channels []*channel

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc // set by a Start that succeeded
	loops   sync.WaitGroup
	stop    sync.Once
}

// New checks cfg and returns an Alerter; Start runs it.
func New(cfg Config) (*Alerter, error) {
	if cfg.DB == nil || cfg.NATS == nil {
		return nil, errors.New("alerts: Config.DB and Config.NATS are required")
	}
	base := cfg.Base.WithDefaults()
	a := &Alerter{db: cfg.DB, nc: cfg.NATS, webhook: cfg.WebhookURL, keys: cfg.WebhookKeys, http: &http.Client{Timeout: sendTimeout,
		// The webhook's receiver is not trusted with where the signed alert
		// goes next: a redirect is its answer, a failure.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		backoff: cfg.SendBackoff, metrics: cfg.Metrics, now: base.Now, log: base.Logger.With("component", "alerter"),
		states: map[string]*projection.Message{}}
	if a.backoff <= 0 {
		a.backoff = time.Second
	}
	a.raised = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waybill_alerts_raised_total",
		Help: "Alerts recorded, by code. An alert derived again from a redelivered event is not counted.",
	}, []string{"code"})
	for _, c := range Codes {
		a.raised.WithLabelValues(string(c))
	}
	a.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waybill_alert_sends_failed_total",
		Help: "Failed sends of an alert, by channel (nats, webhook); each is retried.",
	}, []string{"channel"})
	a.channels = []*channel{a.natsChannel()}
	if a.webhook != "" {
		a.channels = append(a.channels, a.webhookChannel())
	}
	for _, ch := range a.channels {
		a.failed.WithLabelValues(ch.name)
	}
	var err error
	a.consumer, err = feed.NewConsumer(feed.Config{DB: a.db, Group: AlerterGroup, Handle: a.handle,
		PollInterval: cfg.PollInterval, Metrics: cfg.Metrics, Base: base})
	if err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return a, nil
}

// Start registers the metrics, starts the send loops, which first send
// whatever an earlier run left unsent, and starts reading the feed. It runs
// until Stop is called; ctx bounds the start only. An Alerter starts once.
func (a *Alerter) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("alerts: the alerter was started already")
	}
	a.started = true
	if a.webhook != "" && a.keys != nil {
		if _, err := a.keys(ctx); err != nil {
			return fmt.Errorf("alerts: the webhook's signing keys: %w", err)
		}
	}
	if a.metrics != nil {
		if err := a.register(); err != nil {
			return err
		}
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	for _, ch := range a.channels {
		a.loops.Add(1)
		go func() {
			defer a.loops.Done()
			a.sendLoop(loopCtx, ch)
		}()
	}
	if err := a.consumer.Start(ctx); err != nil {
		cancel()
		a.loops.Wait()
		a.unregister()
		return fmt.Errorf("alerts: start: %w", err)
	}
	a.cancel = cancel
	a.log.Info("alerter started", "webhook", a.webhook != "")
	return nil
}

func (a *Alerter) unregister() {
	if a.metrics != nil {
		a.metrics.Unregister(a.raised)
		a.metrics.Unregister(a.failed)
	}
}

func (a *Alerter) register() error {
	if err := a.metrics.Register(a.raised); err != nil {
		return fmt.Errorf("alerts: register metrics: %w", err)
	}
	if err := a.metrics.Register(a.failed); err != nil {
		a.metrics.Unregister(a.raised)
		return fmt.Errorf("alerts: register metrics: %w", err)
	}
	return nil
}

// Stop stops reading the feed, then the send loops, and waits for them
// within ctx. An alert whose send was cut short stays unsent and is sent
// at the next start. Safe to call twice, and before Start.
func (a *Alerter) Stop(ctx context.Context) {
	a.mu.Lock()
	cancel := a.cancel
	a.mu.Unlock()
	if cancel == nil {
		return
	}
	a.consumer.Stop(ctx)
	a.stop.Do(func() {
		cancel()
		a.unregister()
	})
	done := make(chan struct{})
	go func() {
		a.loops.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		a.log.Warn("alert send loops still stopping", "err", ctx.Err())
	}
}

// maxStates bounds Alerter.states; when full, it starts over.
const maxStates = 4096

// handle derives the alerts of one event and records the new ones. It runs
// on the feed consumer's goroutine, one event at a time in feed order,
// which may hand a stream's versions over out of order (docs/feed.md,
// "Order"): an event that does not follow the state held is folded from
// the journal.
func (a *Alerter) handle(ctx context.Context, events []journal.Event) error {
	read, clean, err := a.readUnknown(ctx, events)
	if err != nil {
		return fmt.Errorf("alerts: fold position %d: %w", events[0].Position, err)
	}
	for _, e := range events {
		if err := a.handleEvent(ctx, e, read, clean); err != nil {
			return err
		}
	}
	return nil
}

// readUnknown reads the message streams of events whose state before their
// first event here the alerter does not hold, and of which an event may
// raise an alert: handleEvent would fold each from its stream, so they are
// read all at once. A stream whose event can raise an alert only beside a
// failure (NeedsFailure) is read only if the journal holds one before it;
// clean gives the version of such an event, which raises nothing.
func (a *Alerter) readUnknown(ctx context.Context, events []journal.Event) (read map[string][]journal.Event, clean map[string]int, err error) {
	var streams, probed []string
	var versions []int
	first := map[string]int{}
	asked := map[string]bool{}
	for _, e := range events {
		if !e.Kind().Message() {
			continue
		}
		if _, ok := first[e.Stream]; !ok {
			first[e.Stream] = e.Version
		}
		if !MayRaise(e) || asked[e.Stream] {
			continue
		}
		v := first[e.Stream]
		if m := a.states[e.Stream]; v != 1 && (m == nil || m.Version != v-1) {
			asked[e.Stream] = true
			if NeedsFailure(e) {
				probed, versions = append(probed, e.Stream), append(versions, e.Version)
			} else {
				streams = append(streams, e.Stream)
			}
		}
	}
	failed, err := journal.FailedBefore(ctx, a.db, probed, versions)
	if err != nil {
		return nil, nil, err
	}
	clean = make(map[string]int, len(probed)-len(failed))
	for i, s := range probed {
		if failed[s] {
			streams = append(streams, s)
		} else {
			clean[s] = versions[i]
		}
	}
	read, err = journal.Streams(ctx, a.db, streams)
	return read, clean, err
}

// handleEvent derives and records the alerts of e, folding its stream from
// read, or from a read of its own when read does not hold it: the
// remembered state refused e, or the stream was forgotten by an earlier
// event of the same transaction (its message settled). An event clean
// names raises nothing and is not folded.
func (a *Alerter) handleEvent(ctx context.Context, e journal.Event, read map[string][]journal.Event, clean map[string]int) error {
	before, after := a.next(e)
	if !MayRaise(e) {
		return nil
	}
	if !e.Kind().Message() {
		// Of no message: raised from the event alone.
		return a.recordAll(ctx, Derive(e, nil, nil))
	}
	if after == nil {
		if v, ok := clean[e.Stream]; ok && v == e.Version {
			return nil
		}
		events, ok := read[e.Stream]
		if !ok {
			var err error
			if events, err = journal.Stream(ctx, a.db, e.Stream); err != nil {
				return fmt.Errorf("alerts: fold position %d: %w", e.Position, err)
			}
		}
		if before, after = a.fold(e, events); after == nil {
			return nil
		}
		a.remember(e.Stream, after)
	}
	return a.recordAll(ctx, Derive(e, before, after))
}

// recordAll records the alerts in turn.
func (a *Alerter) recordAll(ctx context.Context, alerts []Alert) error {
	for _, al := range alerts {
		if err := a.record(ctx, al); err != nil {
			return err
		}
	}
	return nil
}

// next folds e on the remembered state of its stream when that is the state
// just before e, and remembers the result. Otherwise (a stream not
// remembered, an event seen again after a failed handle, an event the fold
// refuses) it forgets the stream and returns nils: fold reads it instead.
func (a *Alerter) next(e journal.Event) (before, after *projection.Message) {
	if !e.Kind().Message() {
		return nil, nil
	}
	before = a.states[e.Stream]
	delete(a.states, e.Stream)
	if before == nil || before.Version != e.Version-1 {
		if e.Version != 1 {
			return nil, nil
		}
		before = &projection.Message{}
	}
	after = before.Clone()
	if err := projection.Apply(after, e); err != nil {
		return nil, nil
	}
	a.remember(e.Stream, after)
	return before, after
}

// remember keeps m as the state of stream, unless the message is settled:
// its next event, if any, waits for an operator, and the map would fill
// with finished messages until it had to start over, forgetting those in
// flight too.
func (a *Alerter) remember(stream string, m *projection.Message) {
	if m.Status.Settled() {
		delete(a.states, stream)
		return
	}
	if len(a.states) >= maxStates {
		clear(a.states)
	}
	a.states[stream] = m
}

// fold returns the state of e's message before e and after it, from the
// events of its stream. An event the fold refuses is logged and raises
// nothing (after is nil): the audit reports it, and alerts must not stop
// behind it.
func (a *Alerter) fold(e journal.Event, events []journal.Event) (before, after *projection.Message) {
	before = &projection.Message{}
	for _, x := range events {
		if x.Version >= e.Version {
			break
		}
		// A refused earlier event is skipped, as the audit skips it.
		_ = projection.Apply(before, x)
	}
	after = before.Clone()
	if err := projection.Apply(after, e); err != nil {
		a.log.Error("journal event refused by the fold; no alert derived from it", "position", e.Position, "err", err)
		return nil, nil
	}
	return before, after
}

const insertSQL = `INSERT INTO alerts (id, code, severity, key, position, raised_at, body, webhook)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`

// record stores the alert unless its id is stored already, and wakes the
// send loops for a new one.
func (a *Alerter) record(ctx context.Context, al Alert) error {
	body, err := plainjson.Marshal(al)
	if err != nil {
		return fmt.Errorf("alerts: encode %s: %w", al.ID, err)
	}
	tag, err := a.db.Exec(ctx, insertSQL, al.ID, string(al.Code), string(al.Severity), al.Key, al.Position,
		al.RaisedAt, body, a.webhook != "")
	if err != nil {
		return fmt.Errorf("alerts: record %s: %w", al.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	a.raised.WithLabelValues(string(al.Code)).Inc()
	a.log.Info("alert raised", "id", al.ID, "code", al.Code, "severity", al.Severity, "key", al.Key)
	for _, ch := range a.channels {
		select {
		case ch.wake <- struct{}{}:
		default:
		}
	}
	return nil
}
