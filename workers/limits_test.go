package workers_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/workers"
)

// cluster creates spec and starts three worker processes on the bundle's
// database and a NATS server on loopback that this test's Writer, on the
// real clock as theirs are, publishes its wake-ups to.
func cluster(t *testing.T, b *bundle, spec lifecycle.Target) {
	t.Helper()
	ns := natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
	t.Cleanup(func() { ns.Stop(context.Background()) })
	if err := ns.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var err error
	if b.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.nc.Close)
	b.clock = testclock.New(time.Now().UTC())
	b.w = b.writer(t, workers.NewPublisher(b.nc, nil, nil))
	b.target(t, spec)
	for range 3 {
		startWorkerProcess(t, b, ns.ClientURL(), 0)
	}
}

// openRequests has the sink answer 200 to each request once hold returns,
// counting the requests open and the most open at once.
func openRequests(b *bundle, hold func()) (open, most *atomic.Int32) {
	open, most = new(atomic.Int32), new(atomic.Int32)
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int {
		n := open.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		hold()
		open.Add(-1)
		return http.StatusOK
	})
	return open, most
}

// waitDelivered waits for n deliveries delivered, and returns how long
// that took from start.
func (b *bundle) waitDelivered(t *testing.T, n int, start time.Time) time.Duration {
	t.Helper()
	testpoll.Until(t, "every delivery delivered", func() bool {
		var delivered int
		if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM deliveries WHERE state = 'delivered'`).Scan(&delivered); err != nil {
			t.Fatal(err)
		}
		return delivered == n
	})
	return time.Since(start)
}

// TestMaxConcurrentAcrossThreeProcesses: three processes, max_concurrent
// 2, a receiver that takes 250 ms per request never has more than 2
// requests open at once, and every message is delivered, the backlog the
// limit held moving as fast as 2 in flight allow (no sweep runs here: the
// outcomes that free a slot claim the next).
func TestMaxConcurrentAcrossThreeProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, most := openRequests(b, func() { time.Sleep(250 * time.Millisecond) }) // the receiver's own pace
	spec := b.httpTarget("slow")
	spec.MaxConcurrent = 2
	cluster(t, b, spec)
	const messages = 24
	start := time.Now()
	b.ingest(t, messages)
	took := b.waitDelivered(t, messages, start)
	if m := most.Load(); m > 2 {
		t.Errorf("the receiver had %d requests open at once, want at most 2", m)
	}
	// 24 × 250 ms with 2 in flight is 3 s; the bound is generous, for
	// the machine is shared.
	if took > 30*time.Second {
		t.Errorf("%d messages took %v with 2 in flight of 250 ms, want about 3 s", messages, took)
	}
	t.Logf("%d messages in %v", messages, took)
	b.audit(t)
}

// TestSlotsBoundEachProcessNotTheCluster: three processes and a target
// with slots 2 and no max_concurrent: the receiver, holding every request,
// sees 2 from each process at once, 6 in all and no more, and every
// message is delivered once it lets them go.
func TestSlotsBoundEachProcessNotTheCluster(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	open, most := openRequests(b, func() { <-release })
	spec := b.httpTarget("wide")
	spec.Slots = 2
	cluster(t, b, spec)
	const messages = 20
	start := time.Now()
	b.ingest(t, messages)
	testpoll.Until(t, "6 requests open", func() bool { return open.Load() == 6 })
	b.audit(t) // six attempts in flight, the rest queued
	close(release)
	b.waitDelivered(t, messages, start)
	if m := most.Load(); m != 6 {
		t.Errorf("the receiver had %d requests open at once, want 2 from each of 3 processes", m)
	}
	b.audit(t)
}

// TestRateAcrossThreeProcesses: three processes, rate.per_second 10 and
// burst 5, 40 messages (fewer than the requirement's 300, to keep the
// tests short): the receiver never sees more than 10 × W + 5 requests in
// any window of W seconds, and all arrive in about 3.5 s.
func TestRateAcrossThreeProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var seen []time.Time
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int {
		mu.Lock()
		seen = append(seen, time.Now())
		mu.Unlock()
		return http.StatusOK
	})
	const perSecond, burst, messages = 10, 5, 40
	spec := b.httpTarget("paced")
	spec.Rate = &lifecycle.Rate{PerSecond: perSecond, Burst: burst}
	cluster(t, b, spec)
	start := time.Now()
	b.ingest(t, messages)
	took := b.waitDelivered(t, messages, start)
	mu.Lock()
	defer mu.Unlock()
	// The claims keep to the bound exactly; the requests may bunch by the
	// time they take to arrive: a process the machine leaves waiting
	// between its claims and their requests sends them together, up to a
	// burst's worth over the bound on a busy machine.
	checkWindows(t, "claims", claimTimes(t, b), perSecond, burst, 0)
	checkWindows(t, "requests", seen, perSecond, burst, burst)
	// (40 - 5) / 10 = 3.5 s at the rate; the upper bound is generous, for
	// the machine is shared.
	if ideal := time.Duration(messages-burst) * time.Second / perSecond; took < ideal*9/10 || took > 15*ideal {
		t.Errorf("%d messages took %v at %d/s with a burst of %d, want about %v", messages, took, perSecond, burst, ideal)
	}
	t.Logf("%d messages in %v", messages, took)
	b.audit(t)
}

// claimTimes are the times of the claims journaled.
func claimTimes(t *testing.T, b *bundle) []time.Time {
	t.Helper()
	rows, err := b.db.Query(b.ctx, `SELECT recorded_at FROM journal WHERE kind = 'delivery.claimed'`)
	if err != nil {
		t.Fatal(err)
	}
	times, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	return times
}

// checkWindows fails the test when more than perSecond × W + burst +
// slack of times fall in a window of W seconds.
func checkWindows(t *testing.T, what string, times []time.Time, perSecond float64, burst, slack int) {
	t.Helper()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for _, w := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second} {
		bound := int(perSecond*w.Seconds()) + burst + slack
		for i, from := range times {
			n, _ := slices.BinarySearchFunc(times[i:], from.Add(w), func(a, b time.Time) int { return a.Compare(b) })
			if n > bound {
				t.Errorf("%d %s within %v from %v, want at most %d", n, what, w, from.Sub(times[0]), bound)
				break
			}
		}
	}
}

// TestLimitedDrainAcrossThreeProcesses measures a backlog's drain across
// three processes under max_concurrent 4 to a receiver that answers at
// once: it goes at the pace 4 in flight allow, not the sweep's (none
// runs here). Each outcome claims the next under the target's claim lock
// held alone, so a slow outcome's transaction slows the whole target:
// JIT-compiled plans (projection.LookupPlanSQL) made it 2 – 5 a second.
func TestLimitedDrainAcrossThreeProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, most := openRequests(b, func() {})
	spec := b.httpTarget("limited")
	spec.MaxConcurrent = 4
	cluster(t, b, spec)
	const messages = 100
	b.ingest(t, messages)
	start := time.Now()
	took := b.waitDelivered(t, messages, start)
	if m := most.Load(); m > 4 {
		t.Errorf("the receiver had %d requests open at once, want at most 4", m)
	}
	// About 1 s here; the bound is generous, for the machine is shared.
	if took > 10*time.Second {
		t.Errorf("%d messages took %v under max_concurrent 4", messages, took)
	}
	t.Logf("%d messages drained in %v: %.0f/s", messages, took, messages/took.Seconds())
}
