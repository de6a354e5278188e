package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

func TestDeliversToHTTPAndFileTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	b.target(t, b.httpTarget("web"))
	b.target(t, lifecycle.Target{Name: "disk", Kind: "file", Enabled: true,
		Config: json.RawMessage(`{"dir":` + strconv.Quote(dir) + `,"extension":"txt"}`)})
	b.runtime(t, 0)

	ms := b.ingest(t, 20)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	for _, m := range ms {
		m = b.load(t, m.ID)
		for _, d := range m.Deliveries {
			if d.Attempts != 1 {
				t.Errorf("delivery %s to %s: %d attempts, want 1", d.ID, d.Target, d.Attempts)
			}
			switch d.Target {
			case "web":
				if n := b.sink.count(d.ID.String()); n != 1 {
					t.Errorf("sink got delivery %s %d times, want once", d.ID, n)
				}
			case "disk":
				data, err := os.ReadFile(filepath.Join(dir, m.ID.String()+"-"+strconv.Itoa(d.Seq)+".txt"))
				if err != nil || !strings.HasPrefix(string(data), "message ") {
					t.Errorf("file of delivery %s: %q, %v", d.ID, data, err)
				}
			}
		}
	}
	h := b.sink.headers
	for _, name := range []string{"Waybill-Message-Id", "Waybill-Delivery-Id", "Waybill-Attempt", "Idempotency-Key"} {
		if h.Get(name) == "" {
			t.Errorf("header %s missing", name)
		}
	}
	if got := h.Get("Content-Type"); got != "text/plain" {
		t.Errorf("Content-Type %q, want text/plain", got)
	}
	b.audit(t)
}

// TestCatchUpTakesTheBacklog ingests while no worker listens: the wake-ups
// are lost, and the workers' catch-up at start delivers everything without
// the sweep.
func TestCatchUpTakesTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	ms := b.ingest(t, 30)
	b.runtime(t, 0)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	b.audit(t)
}

// TestABacklogDrainsThroughItsOutcomes: a target that starts to a backlog
// larger than its slots takes the rest with its outcomes, each outcome's
// transaction claiming the next due delivery. Audited with attempts in
// flight and the rest queued, and again once all is delivered.
func TestABacklogDrainsThroughItsOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.MaxConcurrent = 2
	b.target(t, spec)
	release := make(chan struct{})
	b.sink.hold(release)
	ms := b.ingest(t, 10) // no worker listens yet: the wake-ups are lost
	b.runtime(t, 0)
	// The catch-up claimed as many as it asked for, one per slot: a backlog.
	testpoll.Until(t, "both slots attempting", func() bool { return b.sink.requests() == 2 })
	b.audit(t)
	close(release)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	var both int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM (SELECT txid FROM journal GROUP BY txid
		HAVING bool_or(kind = 'delivery.attempted') AND bool_or(kind = 'delivery.claimed')) x`).Scan(&both); err != nil {
		t.Fatal(err)
	}
	if both == 0 {
		t.Error("no outcome's transaction claimed the next due delivery")
	}
	b.audit(t)
}

// TestOverflowDropsWakeupsNotDeliveries floods a target that takes one
// attempt at a time: while that attempt is held, the worker drops the
// wake-ups it has no room for, and once it goes on, everything is
// delivered all the same.
func TestOverflowDropsWakeupsNotDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("slow")
	spec.MaxConcurrent = 1
	b.target(t, spec)
	release := make(chan struct{})
	b.sink.hold(release)
	b.runtime(t, 0)
	ms := b.ingest(t, 60)
	// The first message's attempt holds the one slot, and the worker's
	// queue has room for two wake-ups of the others.
	testpoll.Until(t, "a wake-up dropped", func() bool { return sum(t, b, "waybill_wakeups_dropped_total") > 0 })
	close(release)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	b.audit(t)
}

// TestLostWakeupsAreSweptUp publishes every wake-up into a closed
// connection: each publish fails, is counted, and the sweep wakes the
// deliveries once they are due. The worker's first catch-up runs beside
// the ingests and may claim some first; the sweep wakes the rest.
func TestLostWakeupsAreSweptUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	b.runtime(t, 0)
	ns := natsserver.New(natsserver.Config{})
	if err := ns.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	dead, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	ns.Stop(t.Context())
	lossy := b.writer(t, workers.NewPublisher(dead, nil, b.metrics))

	for i := range 5 {
		if _, _, err := lossy.Ingest(b.ctx, newMessage(i)); err != nil {
			t.Fatal(err)
		}
	}
	if failed := sum(t, b, "waybill_wakeups_failed_total"); failed != 5 {
		t.Fatalf("failed publishes: %v, want 5", failed)
	}
	b.clock.Advance(lifecycle.DispatchBackoff(1))
	r, err := b.sweeper(t).Pass(b.ctx)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	testpoll.Until(t, "5 delivered", func() bool {
		var n int
		if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM messages WHERE status = 'delivered'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 5
	})
	var woken int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM (SELECT DISTINCT ON (delivery_id) kind FROM journal
		WHERE kind IN ('delivery.woken', 'delivery.claimed') ORDER BY delivery_id, position) f
		WHERE kind = 'delivery.woken'`).Scan(&woken); err != nil {
		t.Fatal(err)
	}
	if r.Woken != woken {
		t.Fatalf("sweep: %+v; the journal has %d deliveries woken before any claim", r, woken)
	}
	b.audit(t)
}

// TestStopReleasesASlowAttempt stops the runtime while an HTTP attempt
// hangs: after the drain grace the attempt is cancelled and released as
// started, so the delivery is retrying and due now, never failed.
func TestStopReleasesASlowAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	entered := make(chan struct{}, 1)
	b.sink.setAnswer(func(_ int, _ http.ResponseWriter, r *http.Request) int {
		entered <- struct{}{}
		<-r.Context().Done()
		return http.StatusOK
	})
	rt := b.runtime(t, 50*time.Millisecond)
	m := b.ingest(t, 1)[0]
	<-entered
	rt.Stop(b.ctx)

	d := b.load(t, m.ID).Deliveries[0]
	if d.State != lifecycle.StateRetrying || !d.NextDue.Equal(b.clock.Now()) {
		t.Fatalf("after stop: %s due %s, want retrying due now", d.State, d.NextDue)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	last, ok := events[len(events)-1].Payload.(*journal.DeliveryReleased)
	if !ok || !last.Started {
		t.Fatalf("last event %s, want delivery.released started", events[len(events)-1].Kind())
	}
	b.audit(t)
}

// TestStopLetsAnAttemptFinishWithinGrace: an attempt that ends inside the
// drain grace is recorded as it ended.
func TestStopLetsAnAttemptFinishWithinGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	entered, finish := make(chan struct{}, 1), make(chan struct{})
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int {
		entered <- struct{}{}
		<-finish
		return http.StatusOK
	})
	rt := b.runtime(t, time.Minute)
	m := b.ingest(t, 1)[0]
	<-entered
	stopped := make(chan struct{})
	go func() {
		rt.Stop(b.ctx)
		close(stopped)
	}()
	close(finish)
	<-stopped
	if d := b.load(t, m.ID).Deliveries[0]; d.State != lifecycle.StateDelivered {
		t.Fatalf("after stop: %s, want delivered", d.State)
	}
}

// TestRetryPolicy answers 503 with a Retry-After, then 200: the delivery
// retries at the time the policy and the header give, and the worker's
// timer claims it once the clock reaches that time, no sweep running.
func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.Retry = lifecycle.RetryPolicy{Strategy: lifecycle.RetryFixed, BaseDelay: lifecycle.Duration(time.Second),
		MaxDelay: lifecycle.Duration(time.Minute), MaxAttempts: 5, MaxAge: lifecycle.Duration(time.Hour)}
	b.target(t, spec)
	b.sink.setAnswer(func(n int, w http.ResponseWriter, _ *http.Request) int {
		if n == 1 {
			w.Header().Set("Retry-After", "120") // above max_delay: capped at 1 min
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	b.runtime(t, 0)
	m := b.ingest(t, 1)[0]
	id := m.Deliveries[0].ID
	b.waitState(t, id, lifecycle.StateRetrying)
	d := b.load(t, m.ID).Deliveries[0]
	if want := b.clock.Now().Add(time.Minute); !d.NextDue.Equal(want) {
		t.Fatalf("retry at %s, want %s (Retry-After capped at max_delay)", d.NextDue, want)
	}
	if !strings.Contains(d.LastError, "503") {
		t.Errorf("last error %q does not name the status", d.LastError)
	}
	b.clock.Advance(time.Minute)
	b.waitStatus(t, lifecycle.StatusDelivered, m)
	b.audit(t)
}

// TestRetryBoundsFailForGood: a receiver that always fails for now ends
// the delivery at max_attempts with a reason naming the bound, and again
// after an operator's redelivery, which starts the budget afresh; a 4xx
// ends it at once.
func TestRetryBoundsFailForGood(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.Retry = lifecycle.RetryPolicy{MaxAttempts: 2, BaseDelay: lifecycle.Duration(time.Second)}
	b.target(t, spec)
	b.sink.setAnswer(func(n int, _ http.ResponseWriter, _ *http.Request) int { return http.StatusInternalServerError })
	b.runtime(t, 0)
	m := b.ingest(t, 1)[0]
	// retryThenFail waits for the first failure's retry, moves the clock
	// past it for the worker's timer to claim it, and returns the delivery
	// once the second failure ends it.
	retryThenFail := func() projection.Delivery {
		t.Helper()
		b.waitState(t, m.Deliveries[0].ID, lifecycle.StateRetrying)
		b.clock.Advance(2 * time.Second)
		b.waitStatus(t, lifecycle.StatusError, m)
		return b.load(t, m.ID).Deliveries[0]
	}
	if d := retryThenFail(); d.Attempts != 2 || !strings.Contains(d.LastError, "retry.max_attempts") {
		t.Fatalf("failed after %d attempts with %q", d.Attempts, d.LastError)
	}

	// Redelivered past the delivery's max_age, it has the whole budget
	// again: it retries after its next failure, and fails for good at the
	// second attempt since the redelivery.
	b.clock.Advance(100 * time.Hour)
	if _, err := b.w.Redeliver(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "operator:admin"}); err != nil {
		t.Fatal(err)
	}
	if d := retryThenFail(); d.Attempts != 4 || !strings.Contains(d.LastError, "gave up after attempt 2: retry.max_attempts") {
		t.Fatalf("redelivered: failed after %d attempts with %q", d.Attempts, d.LastError)
	}

	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int { return http.StatusUnprocessableEntity })
	m = b.ingest(t, 1)[0]
	b.waitStatus(t, lifecycle.StatusError, m)
	if d := b.load(t, m.ID).Deliveries[0]; d.Attempts != 1 || !strings.Contains(d.LastError, "422") {
		t.Fatalf("4xx: %d attempts, %q", d.Attempts, d.LastError)
	}
	b.audit(t)
}

// TestReceipts: a target that awaits receipts hands over into awaiting_ack;
// a receipt settles it, and a missing one fails it at the deadline.
func TestReceipts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("partner")
	spec.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Hour)}
	b.target(t, spec)
	b.runtime(t, 0)
	ms := b.ingest(t, 2)
	b.waitStatus(t, lifecycle.StatusAwaitingReceipt, ms...)
	if _, err := b.w.Receipt(b.ctx, ms[0].Deliveries[0].ID, true, "MDN processed", "source:partner"); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, lifecycle.StatusDelivered, ms[0])
	b.clock.Advance(time.Hour)
	if r, err := b.sweeper(t).Pass(b.ctx); err != nil || r.TimedOut != 1 {
		t.Fatalf("sweep: %+v, %v", r, err)
	}
	d := b.load(t, ms[1].ID).Deliveries[0]
	if d.State != lifecycle.StateFailed || d.LastError != "no receipt within 1h0m0s" {
		t.Fatalf("overdue receipt: %s, %q", d.State, d.LastError)
	}
	b.audit(t)
}

// TestReceiptsByTheReceiversID: a target that takes the receiver's id
// from its answer hands over with it, and a receipt by that id settles
// the delivery.
func TestReceiptsByTheReceiversID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sink.setAnswer(func(n int, w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("X-Message-Id", fmt.Sprintf("SM-%d", n))
		return http.StatusAccepted
	})
	spec := b.httpTarget("sms")
	spec.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Hour),
		Correlate: &lifecycle.Correlation{Header: "X-Message-Id"}}
	b.target(t, spec)
	b.runtime(t, 0)
	ms := b.ingest(t, 1)
	b.waitStatus(t, lifecycle.StatusAwaitingReceipt, ms...)
	m, id, err := b.w.ReceiptByExternalID(b.ctx, commands.ExternalReceipt{Target: "sms", ExternalID: "SM-1", Final: true,
		Positive: true, Status: "DELIVRD"}, "operator:gateway")
	if err != nil || id != ms[0].Deliveries[0].ID || m.Status != lifecycle.StatusDelivered {
		t.Fatalf("receipt by SM-1: %v %v", id, err)
	}
	b.audit(t)
}

// TestDisabledTargetHoldsThenRecovers: a disabled target claims nothing;
// its deliveries are held, neither woken nor stalled by the sweep;
// enabling it claims them again with no other action.
func TestDisabledTargetHoldsThenRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.Enabled = false
	b.target(t, spec)
	rt := b.runtime(t, 0)
	ms := b.ingest(t, 3)
	s := b.sweeper(t)
	for n := 1; n <= lifecycle.DefaultMaxDispatches; n++ {
		b.clock.Advance(lifecycle.DispatchBackoff(n))
		r, err := s.Pass(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stalled != 0 || r.Woken != 0 {
			t.Fatalf("pass %d: woke %d and stalled %d of a disabled target's deliveries", n, r.Woken, r.Stalled)
		}
	}
	for _, m := range ms {
		if d := b.load(t, m.ID).Deliveries[0]; d.State != lifecycle.StateQueued || d.Attempts != 0 {
			t.Fatalf("delivery of a disabled target %s after %d attempts", d.State, d.Attempts)
		}
	}
	if b.sink.requests() != 0 {
		t.Fatal("a disabled target was sent to")
	}

	spec.Enabled = true
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if err := rt.Sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	b.audit(t)
}

// TestExternalNATS runs the runtime over a NATS server reached by URL, as
// --nats-url does.
func TestExternalNATS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
	t.Cleanup(func() { ns.Stop(context.Background()) })
	if err := ns.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b.nc = nc
	b.w = b.writer(t, workers.NewPublisher(nc, nil, b.metrics))
	b.target(t, b.httpTarget("web"))
	b.runtime(t, 0)
	ms := b.ingest(t, 10)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
}

// sum adds up a metric over all its labels.
func sum(t *testing.T, b *bundle, name string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// TestConfigChangeReachesOtherProcesses runs two runtimes on one database
// and one NATS, as two processes would: a target enabled through the first
// is worked by the second at once, not at its next resync.
func TestConfigChangeReachesOtherProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.Enabled = false
	b.target(t, spec)
	first := b.runtime(t, 0)
	other := b.writer(t, workers.NewPublisher(b.nc, nil, b.metrics))
	second, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: other, NATS: b.nc,
		Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { second.Stop(context.Background()) })

	spec.Enabled = true
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	first.ConfigChanged()
	first.Stop(b.ctx)
	ms := b.ingest(t, 5)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
}
