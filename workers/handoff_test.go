package workers_test

import (
	"context"
	"testing"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
)

// TestIngestsGoStraightToIdleWorkers: an ingest whose target's worker has a
// slot free claims the delivery for it in the ingest's transaction, with no
// wake-up; one that finds every slot busy wakes the delivery instead; a
// stopped runtime takes nothing.
func TestIngestsGoStraightToIdleWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.MaxConcurrent = 1
	b.target(t, spec)
	rt := b.runtime(t, 0)
	idle := func() bool {
		s, ok := rt.Reserve("web")
		if ok {
			s.Free()
		}
		return ok
	}

	// The worker's first catch-up holds its slot for the query's time:
	// once a message has been delivered, it is over.
	b.waitStatus(t, lifecycle.StatusDelivered, b.ingest(t, 1)...)
	before := sum(t, b, "waybill_wakeups_published_total")
	for i := range 3 {
		testpoll.Until(t, "an idle worker", idle)
		m := b.ingest(t, 1)[0]
		if d := m.Deliveries[0]; d.State != lifecycle.StateDelivering {
			t.Fatalf("message %d: delivery %s after the ingest", i, d.State)
		}
		b.waitStatus(t, lifecycle.StatusDelivered, m)
	}
	var apart int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM (SELECT stream FROM journal GROUP BY stream
		HAVING min(txid) FILTER (WHERE kind = 'delivery.claimed') <> min(txid) FILTER (WHERE kind = 'message.dispatched')) x`).Scan(&apart); err != nil {
		t.Fatal(err)
	}
	// The first message may have been woken.
	if published := sum(t, b, "waybill_wakeups_published_total") - before; published != 0 || apart > 1 {
		t.Fatalf("wake-ups published %v; messages claimed apart from their dispatch %d", published, apart)
	}

	// The one slot is busy: the next delivery is woken, and claimed once
	// the slot is free.
	release := make(chan struct{})
	b.sink.hold(release)
	testpoll.Until(t, "an idle worker", idle)
	busy := b.ingest(t, 2)
	if published := sum(t, b, "waybill_wakeups_published_total") - before; published != 1 {
		t.Fatalf("wake-ups published with the slot busy: %v", published)
	}
	// One attempt held at the sink, claimed at its ingest; one woken,
	// waiting for the slot.
	b.audit(t)
	close(release)
	b.waitStatus(t, lifecycle.StatusDelivered, busy...)

	rt.Stop(context.Background())
	if _, ok := rt.Reserve("web"); ok {
		t.Fatal("a stopped runtime reserved a slot")
	}
	if m := b.ingest(t, 1)[0]; m.Deliveries[0].State != lifecycle.StateQueued {
		t.Fatalf("delivery %s after the runtime stopped", m.Deliveries[0].State)
	}
	b.audit(t)
}
