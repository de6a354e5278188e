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

// fifoTarget creates a fifo target with the policy and a route to it.
func (b *bundle) fifoTarget(t testing.TB, name string, onFailure lifecycle.OnFailure) {
	t.Helper()
	spec := lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: sinkConfig,
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO, OnFailure: onFailure}}
	if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) ingestKeyed(t *testing.T, key string) *projection.Message {
	t.Helper()
	in := newMessage()
	in.OrderingKey = key
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (b *bundle) state(t *testing.T, d projection.Delivery) lifecycle.DeliveryState {
	t.Helper()
	m, err := projection.Load(b.ctx, b.db, d.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	return m.Delivery(d.ID).State
}

func (b *bundle) wantStates(t *testing.T, want map[uuid.UUID]lifecycle.DeliveryState, ms ...*projection.Message) {
	t.Helper()
	for _, m := range ms {
		d := m.Deliveries[0]
		if got := b.state(t, d); got != want[m.ID] {
			t.Errorf("delivery of message %s is %s, want %s", m.ID, got, want[m.ID])
		}
	}
}

// TestLaneAttemptsOneAtATimeInOrder: the deliveries of one key wait behind
// the first; each settling lets the next go, in the same transaction; other
// keys and messages without a key do not wait.
func TestLaneAttemptsOneAtATimeInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t, "hl7", lifecycle.OnFailureBlock)
	a1, a2, a3 := b.ingestKeyed(t, "patient-1"), b.ingestKeyed(t, "patient-1"), b.ingestKeyed(t, "patient-1")
	other, none := b.ingestKeyed(t, "patient-2"), b.ingestKeyed(t, "")
	q, bl := lifecycle.StateQueued, lifecycle.StateBlocked
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: q, a2.ID: bl, a3.ID: bl, other.ID: q, none.ID: q}, a1, a2, a3, other, none)
	if a2.Status != lifecycle.StatusBlocked {
		t.Errorf("a blocked message's status is %s", a2.Status)
	}
	b.audit(t)

	// A blocked delivery is not claimable.
	if _, err := b.w.Claim(b.ctx, a2.Deliveries[0].ID, time.Minute); err == nil {
		t.Fatal("claimed a blocked delivery")
	}
	b.wake.take()
	c, err := b.w.Claim(b.ctx, a1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: lifecycle.StateDelivered, a2.ID: q, a3.ID: bl}, a1, a2, a3)
	if got := b.wake.take(); len(got) != 1 || got[0].DeliveryID != a2.Deliveries[0].ID {
		t.Errorf("wake-ups after the head settled: %v", got)
	}
	b.audit(t)

	// The head fails for good: on_failure block keeps the lane held.
	c, err = b.w.Claim(b.ctx, a2.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Failed("400")); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a2.ID: lifecycle.StateFailed, a3.ID: bl}, a2, a3)
	// Redelivering the failed head retries it in place.
	if _, err := b.w.Redeliver(b.ctx, a2.ID, a2.Deliveries[0].ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a2.ID: q, a3.ID: bl}, a2, a3)
	// Skipping the head lets the next go.
	if _, err := b.w.Skip(b.ctx, a2.ID, a2.Deliveries[0].ID, commands.Action{Operator: "admin", Reason: "sent by hand"}); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a2.ID: lifecycle.StateSkipped, a3.ID: q}, a2, a3)
	// A delivered one sent again joins the back of its lane, behind a3.
	m, err := b.w.Redeliver(b.ctx, a1.ID, a1.Deliveries[0].ID, commands.Action{Operator: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Deliveries[0]; d.State != bl || d.LaneSeq != 4 {
		t.Errorf("sent again: %s at %d, want blocked at 4", d.State, d.LaneSeq)
	}
	if _, err := b.w.Skip(b.ctx, a3.ID, a3.Deliveries[0].ID, commands.Action{Operator: "admin", Reason: ""}); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: q, a3.ID: lifecycle.StateSkipped}, a1, a3)
	b.audit(t)

	// Skipping is refused while a delivery is being attempted.
	c, err = b.w.Claim(b.ctx, a1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Skip(b.ctx, a1.ID, a1.Deliveries[0].ID, commands.Action{Operator: "admin", Reason: ""}); !errors.Is(err, commands.ErrNotSkippable) {
		t.Errorf("skip while delivering: %v", err)
	}
	b.audit(t)
}

// TestLaneOnFailureContinue: a failure lets the next one go.
func TestLaneOnFailureContinue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t, "feed", lifecycle.OnFailureContinue)
	m1, m2 := b.ingestKeyed(t, "k"), b.ingestKeyed(t, "k")
	c, err := b.w.Claim(b.ctx, m1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Failed("400")); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{m1.ID: lifecycle.StateFailed, m2.ID: lifecycle.StateQueued}, m1, m2)
	// The failed one sent again joins the back, behind m2.
	m, err := b.w.Redeliver(b.ctx, m1.ID, m1.Deliveries[0].ID, commands.Action{Operator: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Deliveries[0]; d.State != lifecycle.StateBlocked {
		t.Errorf("sent again: %s, want blocked", d.State)
	}
	b.audit(t)
}

// TestCompleteClaimsTheDeliveryItFrees: a worker's outcome that lets its
// lane go on claims the next delivery in the same transaction, for the
// same worker, with its payload; nobody is woken for it. An outcome that
// frees nothing, and a lane of another target, claim nothing.
func TestCompleteClaimsTheDeliveryItFrees(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t, "hl7", lifecycle.OnFailureBlock)
	a1, a2, a3 := b.ingestKeyed(t, "patient-1"), b.ingestKeyed(t, "patient-1"), b.ingestKeyed(t, "patient-1")
	b.wake.take()
	c, err := b.w.Claim(b.ctx, a1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.w.CompleteAndClaimNext(b.ctx, a1.Deliveries[0].ID, c.Token, lifecycle.Delivered("200"), 0, false); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("a lease of 0: %v", err)
	}

	// A retry frees nothing: the head keeps its lane.
	m, next, err := b.w.CompleteAndClaimNext(b.ctx, a1.Deliveries[0].ID, c.Token, lifecycle.Retry(b.clock.Now(), "503"), time.Minute, false)
	if err != nil || next != nil || m.Deliveries[0].State != lifecycle.StateRetrying {
		t.Fatalf("a retry: %v, next %v", err, next)
	}
	c, err = b.w.Claim(b.ctx, a1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, next, err = b.w.CompleteAndClaimNext(b.ctx, a1.Deliveries[0].ID, c.Token, lifecycle.Delivered("200"), time.Minute, false)
	if err != nil || next == nil {
		t.Fatalf("the head delivered: %v, next %v", err, next)
	}
	if next.Delivery.ID != a2.Deliveries[0].ID || next.Delivery.State != lifecycle.StateDelivering || next.Attempt != 1 ||
		next.Message.ID != a2.ID || string(next.Payload) != string(newMessage().Payload) || !next.LeaseEnd.Equal(b.clock.Now().Add(time.Minute)) {
		t.Fatalf("the next claim %+v", next)
	}
	if got := b.wake.take(); len(got) != 0 {
		t.Errorf("wake-ups for a delivery claimed already: %v", got)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: lifecycle.StateDelivered, a2.ID: lifecycle.StateDelivering,
		a3.ID: lifecycle.StateBlocked}, a1, a2, a3)
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(a2.ID))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(events); n < 2 || events[n-2].Kind() != "delivery.unblocked" || events[n-1].Kind() != "delivery.claimed" {
		t.Fatalf("the next delivery's events %v", events)
	}
	// Audited in flight: one delivering, one blocked behind it.
	b.audit(t)

	// The claim is the worker's like any other: its outcome frees the third.
	_, next, err = b.w.CompleteAndClaimNext(b.ctx, next.Delivery.ID, next.Token, lifecycle.Delivered("200"), time.Minute, false)
	if err != nil || next == nil || next.Delivery.ID != a3.Deliveries[0].ID {
		t.Fatalf("the second delivered: %v, next %v", err, next)
	}
	// The last of its lane frees nothing.
	if _, next, err = b.w.CompleteAndClaimNext(b.ctx, next.Delivery.ID, next.Token, lifecycle.Delivered("200"), time.Minute, false); err != nil || next != nil {
		t.Fatalf("the last delivered: %v, next %v", err, next)
	}
	b.audit(t)
}

// TestLaneGoesOnWhateverAStaleConfigurationSays: a process whose cached
// configuration still says the target keeps no order completes the head
// of a lane another process made under fifo: the lane goes on in the
// same transaction all the same.
func TestLaneGoesOnWhateverAStaleConfigurationSays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "hl7")
	// The other process reads the configuration: no order.
	stale, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	m0 := b.ingest(t)
	if _, err := stale.Claim(b.ctx, m0.Deliveries[0].ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: sinkConfig,
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	a1, a2, a3 := b.ingestKeyed(t, "k"), b.ingestKeyed(t, "k"), b.ingestKeyed(t, "k")
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: lifecycle.StateQueued, a2.ID: lifecycle.StateBlocked,
		a3.ID: lifecycle.StateBlocked}, a1, a2, a3)

	c, err := stale.Claim(b.ctx, a1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: lifecycle.StateDelivered, a2.ID: lifecycle.StateQueued,
		a3.ID: lifecycle.StateBlocked}, a1, a2, a3)
	b.audit(t)

	// Its worker's outcome claims the next as well.
	c, err = stale.Claim(b.ctx, a2.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, next, err := stale.CompleteAndClaimNext(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200"), time.Minute, false)
	if err != nil || next == nil || next.Delivery.ID != a3.Deliveries[0].ID {
		t.Fatalf("the second delivered: %v, next %v", err, next)
	}
	b.audit(t)
}

// TestReleaseFollowsTheTargetAsItIsNow: a release out of turn decides on
// the target's ordering as it is when the release is written, under a
// lock the target's change takes too, not on a configuration a process
// read before the target kept order again.
func TestReleaseFollowsTheTargetAsItIsNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "hl7")
	spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: sinkConfig,
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	a1, a2 := b.ingestKeyed(t, "k"), b.ingestKeyed(t, "k")
	spec.Ordering.Mode = lifecycle.OrderingNone
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	// The sweep's process reads the configuration now: no order.
	stale, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if kind, err := stale.ReleaseBlocked(b.ctx, a1.Deliveries[0].ID); err != nil || kind != "" {
		t.Fatalf("release of the head: %q %v", kind, err)
	}
	spec.Ordering.Mode = lifecycle.OrderingFIFO
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if kind, err := stale.ReleaseBlocked(b.ctx, a2.Deliveries[0].ID); err != nil || kind != "" {
		t.Fatalf("release: %q %v", kind, err)
	}
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{a1.ID: lifecycle.StateQueued, a2.ID: lifecycle.StateBlocked}, a1, a2)
	b.audit(t)
}
