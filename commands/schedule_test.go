package commands_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestScheduledComesDue: a scheduled message's deliveries are made at
// ingest, neither woken nor claimable until their time; then the sweep's
// ComeDue queues and wakes them, and they are delivered as any other.
func TestScheduledComesDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	in := newMessage()
	in.DeliverAt = b.clock.Now().Add(2 * time.Hour)
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != lifecycle.StatusScheduled || len(m.Deliveries) != 2 {
		t.Fatalf("status %s with %d deliveries, want scheduled with 2", m.Status, len(m.Deliveries))
	}
	for _, d := range m.Deliveries {
		if d.State != lifecycle.StateScheduled || !d.NextDue.Equal(in.DeliverAt) || d.DispatchCount != 0 {
			t.Fatalf("delivery %s: %s due %v woken %d", d.Target, d.State, d.NextDue, d.DispatchCount)
		}
	}
	if got := b.wake.take(); len(got) != 0 {
		t.Fatalf("a scheduled dispatch woke %v", got)
	}
	d := m.Deliveries[0]
	if _, err := b.w.Claim(b.ctx, d.ID, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
		t.Fatalf("claim of a scheduled delivery: %v", err)
	}
	if kind, err := b.w.ComeDue(b.ctx, d.ID); err != nil || kind != "" {
		t.Fatalf("ComeDue before its time: %q, %v", kind, err)
	}
	// A redispatch adds what it adds with the same schedule.
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "gamma", Kind: "http", Enabled: true, Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "gamma"}, admin); err != nil {
		t.Fatal(err)
	}
	if m, err = b.w.Redispatch(b.ctx, m.ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	if g := m.Deliveries[2]; g.State != lifecycle.StateScheduled || !g.NextDue.Equal(in.DeliverAt) || m.Status != lifecycle.StatusScheduled {
		t.Fatalf("redispatched: %s due %v, message %s", g.State, g.NextDue, m.Status)
	}

	b.clock.Advance(2 * time.Hour)
	for i, d := range m.Deliveries {
		kind, err := b.w.ComeDue(b.ctx, d.ID)
		if err != nil || kind != journal.KindDeliveryDue {
			t.Fatalf("ComeDue at its time: %q, %v", kind, err)
		}
		if i == 0 {
			if m, err = projection.Load(b.ctx, b.db, m.ID); err != nil {
				t.Fatal(err)
			}
			if m.Status != lifecycle.StatusInProgress {
				t.Fatalf("one delivery due: status %s, want in_progress", m.Status)
			}
		}
	}
	if got := b.wake.take(); len(got) != 3 {
		t.Fatalf("woken %v, want the three deliveries", got)
	}
	// Its retry budget starts when it came due: max_age counts from then.
	if m, err = projection.Load(b.ctx, b.db, m.ID); err != nil {
		t.Fatal(err)
	}
	if d := m.Deliveries[0]; d.State != lifecycle.StateQueued || !d.RedeliveredAt.Equal(b.clock.Now()) {
		t.Fatalf("came due: %s, budget from %v", d.State, d.RedeliveredAt)
	}
	for _, d := range m.Deliveries {
		c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if m, err = b.w.Complete(b.ctx, d.ID, c.Token, lifecycle.Delivered("200 OK")); err != nil {
			t.Fatal(err)
		}
	}
	if m.Status != lifecycle.StatusDelivered {
		t.Fatalf("status %s, want delivered", m.Status)
	}
	// Sent again, a delivered delivery of a scheduled message goes at once.
	if m, err = b.w.Redeliver(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	if d := m.Deliveries[0]; d.State != lifecycle.StateQueued || m.Status != lifecycle.StatusInProgress {
		t.Fatalf("redelivered: %s, message %s", d.State, m.Status)
	}
	b.audit(t)
}

// TestDeliverNow: an operator makes a scheduled message's deliveries due
// at once, journaled as theirs; a message not scheduled is refused.
func TestDeliverNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	in := newMessage()
	delay := lifecycle.Duration(time.Hour)
	in.Delay = &delay
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.DeliverNow(b.ctx, m.ID, commands.Action{Operator: "admin", IfVersion: m.Version + 1}); !errors.Is(err, commands.ErrStale) {
		t.Fatalf("deliver now at another version: %v", err)
	}
	if m, err = b.w.DeliverNow(b.ctx, m.ID, commands.Action{Operator: "admin", IfVersion: m.Version}); err != nil {
		t.Fatal(err)
	}
	if d := m.Deliveries[0]; d.State != lifecycle.StateQueued || m.Status != lifecycle.StatusInProgress {
		t.Fatalf("delivered now: %s, message %s", d.State, m.Status)
	}
	if got := b.wake.take(); len(got) != 1 {
		t.Fatalf("woken %v, want one", got)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if p, ok := last.Payload.(*journal.DeliveryDue); !ok || !p.Early || last.Actor != "operator:admin" {
		t.Fatalf("journaled %s by %s, want an early delivery.due by operator:admin", last.Kind(), last.Actor)
	}
	_, err = b.w.DeliverNow(b.ctx, m.ID, commands.Action{Operator: "admin"})
	var state *commands.StateError
	if !errors.Is(err, commands.ErrNotScheduled) || !errors.As(err, &state) || state.State != "in_progress" {
		t.Fatalf("deliver now of a message in progress: %v", err)
	}
	// A schedule too far ahead is refused, naming the field.
	in.Delay, in.DeliverAt = nil, b.clock.Now().Add(lifecycle.MaxSchedule+time.Minute)
	if _, _, err := b.w.Ingest(b.ctx, in); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("deliver_at 30 days and a minute ahead: %v", err)
	}
	b.audit(t)
}

// TestScheduledHeadHoldsItsLane: a scheduled delivery at the head of a
// fifo lane holds it until it has come due and settled; the delivery
// behind it waits, blocked.
func TestScheduledHeadHoldsItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t, "orders", lifecycle.OnFailureBlock)
	in := newMessage()
	in.OrderingKey, in.DeliverAt = "order-1", b.clock.Now().Add(time.Hour)
	head, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	next := b.ingestKeyed(t, "order-1")
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{
		head.ID: lifecycle.StateScheduled, next.ID: lifecycle.StateBlocked}, head, next)
	b.clock.Advance(time.Hour)
	if _, err := b.w.ComeDue(b.ctx, head.Deliveries[0].ID); err != nil {
		t.Fatal(err)
	}
	c, err := b.w.Claim(b.ctx, head.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, head.Deliveries[0].ID, c.Token, lifecycle.Delivered("200 OK")); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{
		head.ID: lifecycle.StateDelivered, next.ID: lifecycle.StateQueued}, head, next)
	b.audit(t)
}
