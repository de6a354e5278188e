package workers_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testlog"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// TestLostAnswerKeepsTheNextClaim: a worker with a backlog records an
// outcome that claims the next due delivery in its transaction, which
// commits, but its answer is lost. The try made again finds the claim gone
// and goes on with the claim the first try made: the next delivery is
// attempted at once, on a clock that stands still, where it would
// otherwise wait for its lease to end.
func TestLostAnswerKeepsTheNextClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.MaxConcurrent = 1
	b.target(t, spec)
	ms := b.ingest(t, 2)

	logs := &testlog.Buffer{}
	proxy, _, rt := b.proxiedRuntime(t, slog.New(slog.NewTextHandler(logs, nil)))
	// The first attempt's outcome is the next COMMIT: the catch-up that
	// claimed it has, and the slot is busy until the outcome is recorded.
	b.sink.setAnswer(func(n int, _ http.ResponseWriter, _ *http.Request) int {
		if n == 1 {
			proxy.LoseNextCommit()
		}
		return http.StatusOK
	})
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}

	// Far within the lease, which the clock never reaches.
	testpoll.Within(t, 15*time.Second, "both messages delivered", func() bool {
		return b.sink.count(ms[0].Deliveries[0].ID.String()) == 1 && b.sink.count(ms[1].Deliveries[0].ID.String()) == 1
	})
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	if got := len(logs.Lines(`msg="outcome recorded" target=web`)); got != 1 {
		t.Errorf("%d outcomes logged as recorded after a failed try, want 1:\n%s", got, logs.String())
	}
	want := []journal.Kind{journal.KindDeliveryClaimed, journal.KindDeliveryAttempted}
	for _, m := range ms {
		if kinds := dbtest.Kinds(t, b.db, m.Deliveries[0]); !slices.Equal(kinds, want) {
			t.Errorf("delivery %s: events %v, want %v", m.Deliveries[0].ID, kinds, want)
		}
	}
	b.audit(t)
}

// TestLostAnswerKeepsTheHandedClaim: an ingest claims its delivery for an
// idle worker of its process in its own transaction, which commits, but
// its answer is lost. The ingest finds its message stored and returns it,
// and the worker attempts the claim all the same, on a clock that stands
// still, where the delivery would otherwise wait for the lease to end.
func TestLostAnswerKeepsTheHandedClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	proxy, w, rt := b.proxiedRuntime(t, quiet)
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}

	// The worker's first catch-up holds its slots for the query's time:
	// once a message has been delivered, it is over.
	first, _, err := w.Ingest(b.ctx, newMessage(0))
	if err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, lifecycle.StatusDelivered, first)
	testpoll.Until(t, "the worker of web to lend a slot", func() bool {
		s, ok := rt.Reserve("web")
		if ok {
			s.Free()
		}
		return ok
	})

	// The ingest is one round trip, an implicit transaction: its answer
	// is lost after it has committed.
	lost := newMessage(1)
	lost.Payload = []byte("an ingest whose answer is lost")
	proxy.LoseAnswerTo(lost.Payload)
	m, created, err := w.Ingest(b.ctx, lost)
	if err != nil || !created {
		t.Fatalf("the ingest whose answer was lost: %v, created %v", err, created)
	}
	d := m.Deliveries[0]
	if kinds := dbtest.Kinds(t, b.db, d); !slices.Contains(kinds, journal.KindDeliveryClaimed) {
		t.Fatalf("delivery %s: events %v, want it claimed by the ingest", d.ID, kinds)
	}
	b.audit(t) // the claim the ingest committed, attempted or not yet
	// Far within the lease, which the clock never reaches.
	testpoll.Within(t, 15*time.Second, "the delivery attempted", func() bool { return b.sink.count(d.ID.String()) == 1 })
	b.waitStatus(t, lifecycle.StatusDelivered, b.load(t, d.MessageID))
	b.audit(t)
}

// TestLostAnswerKeepsTheCaughtUpClaim: a worker's catch-up at its start
// claims the delivery whose wake-up no one heard, and commits, but its
// answer is lost. The worker attempts the claim all the same, on a clock
// that stands still, where it would otherwise wait for its lease to end.
func TestLostAnswerKeepsTheCaughtUpClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	ms := b.ingest(t, 1) // no worker listens yet: the wake-up is lost
	proxy, _, rt := b.proxiedRuntime(t, quiet)
	// The catch-up's claim is the first COMMIT through the proxy.
	proxy.LoseNextCommit()
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}

	// Far within the lease, which the clock never reaches.
	d := ms[0].Deliveries[0]
	testpoll.Within(t, 15*time.Second, "the delivery attempted", func() bool { return b.sink.count(d.ID.String()) == 1 })
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	want := []journal.Kind{journal.KindDeliveryClaimed, journal.KindDeliveryAttempted}
	if kinds := dbtest.Kinds(t, b.db, d); !slices.Equal(kinds[len(kinds)-2:], want) || slices.Contains(kinds, journal.KindDeliveryLeaseExpired) {
		t.Errorf("delivery %s: events %v, want one claim and its attempt", d.ID, kinds)
	}
	b.audit(t)
}

// proxiedRuntime returns a proxy of the bundle's database, a Writer whose
// connections go through it and a Runtime of the Writer, not yet started
// and stopped when the test ends, both on the bundle's clock and logging
// to log.
func (b *bundle) proxiedRuntime(t *testing.T, log *slog.Logger) (*dbtest.Proxy, *commands.Writer, *workers.Runtime) {
	t.Helper()
	proxy := dbtest.NewProxy(t, b.db)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now, Logger: log},
		DB: proxy.Pool(t), Notifier: workers.NewPublisher(b.nc, nil, b.metrics)})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Now: b.clock.Now, Logger: log},
		Writer: w, NATS: b.nc, Metrics: b.metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	return proxy, w, rt
}
