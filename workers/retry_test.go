package workers_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/workers"
)

// process is what one server process runs on the bundle's database and
// NATS, on the real clock: a Writer, and the Runtime and sweep when
// started.
type process struct {
	w *commands.Writer
}

func (b *bundle) process(t testing.TB) process {
	t.Helper()
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Logger: quiet}, DB: b.db,
		Notifier: workers.NewPublisher(b.nc, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return process{w: w}
}

// runtime starts the process's Runtime, stopped when the test ends (Stop
// is safe to call twice).
func (p process) runtime(t testing.TB, b *bundle) *workers.Runtime {
	t.Helper()
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Logger: quiet}, Writer: p.w, NATS: b.nc,
		DrainGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	return rt
}

// sweep starts the process's sweep with a pass every interval.
func (p process) sweep(t testing.TB, b *bundle, interval time.Duration) {
	t.Helper()
	s, err := sweep.New(sweep.Config{Base: service.Base{Logger: quiet}, Writer: p.w, DB: b.db, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
}

// retryTarget is an http target on the sink that retries after 1 s, then
// 2 s, without jitter.
func (b *bundle) retryTarget() lifecycle.Target {
	spec := b.httpTarget("web")
	spec.Retry = lifecycle.RetryPolicy{Strategy: lifecycle.RetryExponential, BaseDelay: lifecycle.Duration(time.Second),
		Jitter: new(0.0)}
	return spec
}

// failFirst makes the sink answer 503 to its first n requests.
func (s *sink) failFirst(n int) {
	s.setAnswer(func(i int, _ http.ResponseWriter, _ *http.Request) int {
		if i <= n {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
}

// history is the events of the message's only delivery.
func (b *bundle) history(t testing.TB, m *projection.Message) []journal.Event {
	t.Helper()
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(events, func(e journal.Event) bool { return e.DeliveryID != m.Deliveries[0].ID })
}

func kinds(events []journal.Event) []journal.Kind {
	out := make([]journal.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind()
	}
	return out
}

// lateness is, for each claim that follows a retry, how long after the
// retry was due it came.
func lateness(events []journal.Event) []time.Duration {
	var out []time.Duration
	var due time.Time
	for _, e := range events {
		switch p := e.Payload.(type) {
		case *journal.DeliveryAttempted:
			due = p.Outcome.RetryAt
		case *journal.DeliveryClaimed:
			if !due.IsZero() {
				out = append(out, e.RecordedAt.Sub(due))
			}
		}
	}
	return out
}

// TestRetryIsClaimedOnTime: the process that records a retry claims it
// when it comes due, by its own timer, long before the sweep's next pass,
// and the history has no delivery.woken: nothing had to step in.
func TestRetryIsClaimedOnTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.retryTarget())
	b.sink.failFirst(2)
	p := b.process(t)
	p.runtime(t, b)
	p.sweep(t, b, time.Hour)

	m, _, err := p.w.Ingest(b.ctx, newMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	// Two retries, 1 s and 2 s on: the sweep's next pass is an hour away.
	b.waitStatus(t, lifecycle.StatusDelivered, m)
	events := b.history(t, m)
	c, a := journal.KindDeliveryClaimed, journal.KindDeliveryAttempted
	if got, want := kinds(events), []journal.Kind{c, a, c, a, c, a}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	for i, late := range lateness(events) {
		if late < 0 || late >= lifecycle.WakeGrace {
			t.Errorf("retry %d claimed %s after it was due, want within %s", i+1, late, lifecycle.WakeGrace)
		}
	}
	b.audit(t)
}

// TestSweepWakesARetryItsProcessLeft: the process that recorded a retry
// stops before it is due; another process's sweep, which passes every
// 100 ms, leaves the retries the first process claims on time alone and
// wakes the one it left once lifecycle.WakeGrace overdue, and the other
// process's worker claims it.
func TestSweepWakesARetryItsProcessLeft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.retryTarget())
	b.sink.failFirst(2)
	first, second := b.process(t), b.process(t)
	rt := first.runtime(t, b)
	second.sweep(t, b, 100*time.Millisecond)

	m, _, err := first.w.Ingest(b.ctx, newMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "two attempts", func() bool { return b.sink.requests() == 2 })
	testpoll.Until(t, "the second retry recorded", func() bool {
		var state string
		if err := b.db.QueryRow(b.ctx, `SELECT state FROM deliveries WHERE id = $1`, m.Deliveries[0].ID).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state == string(lifecycle.StateRetrying)
	})
	rt.Stop(context.Background())
	second.runtime(t, b)

	b.waitStatus(t, lifecycle.StatusDelivered, m)
	events := b.history(t, m)
	c, a, w := journal.KindDeliveryClaimed, journal.KindDeliveryAttempted, journal.KindDeliveryWoken
	if got, want := kinds(events), []journal.Kind{c, a, c, a, w, c, a}; !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	due := events[3].Payload.(*journal.DeliveryAttempted).Outcome.RetryAt
	if woken := events[4].RecordedAt; woken.Before(due.Add(lifecycle.WakeGrace)) {
		t.Errorf("woken at %s, %s after the retry was due, want %s at least", woken, woken.Sub(due), lifecycle.WakeGrace)
	}
	b.audit(t)
}
