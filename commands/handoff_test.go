package commands_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// taker holds a number of free slots per target and records the claims
// run in them.
type taker struct {
	mu    sync.Mutex
	free  map[string]int
	ran   []commands.Claim
	lease time.Duration
}

func (k *taker) Reserve(target string) (commands.Slot, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.free[target] == 0 {
		return nil, false
	}
	k.free[target]--
	return &takerSlot{k: k, target: target}, true
}

// takerSlot fails the test's taker if used twice.
type takerSlot struct {
	k      *taker
	target string
	used   bool
}

func (s *takerSlot) Lease() time.Duration { return s.k.lease }

func (s *takerSlot) Run(c commands.Claim) {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	if s.used {
		panic("slot used twice")
	}
	s.used = true
	s.k.ran = append(s.k.ran, c)
}

func (s *takerSlot) Free() {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	if s.used {
		panic("slot used twice")
	}
	s.used = true
	s.k.free[s.target]++
}

func (k *taker) take() (ran []commands.Claim, free map[string]int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ran, k.ran = k.ran, nil
	free = map[string]int{}
	for t, n := range k.free {
		free[t] = n
	}
	return ran, free
}

// TestIngestHandsDeliveriesToFreeSlots: an ingest claims, in its own
// transaction, each delivery whose target has a slot free for it, and
// wakes only the others; the claim holds the payload and is the
// delivery's, and a worker that dies before attempting it leaves it to its
// lease.
func TestIngestHandsDeliveriesToFreeSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	k := &taker{free: map[string]int{"alpha": 1}, lease: time.Minute}
	b.w.SetTaker(k)

	m := b.ingest(t)
	alpha, beta := m.Deliveries[0], m.Deliveries[1]
	if alpha.State != lifecycle.StateDelivering || beta.State != lifecycle.StateQueued {
		t.Fatalf("after the ingest: alpha %s, beta %s", alpha.State, beta.State)
	}
	// The claim is in flight, made in the dispatch's transaction.
	b.audit(t)
	if got := b.wake.take(); len(got) != 1 || got[0].DeliveryID != beta.ID {
		t.Fatalf("wake-ups: %v", got)
	}
	ran, free := k.take()
	if len(ran) != 1 || free["alpha"] != 0 {
		t.Fatalf("claims run %d, free slots %v", len(ran), free)
	}
	c := ran[0]
	if c.Delivery.ID != alpha.ID || c.Token != alpha.ClaimToken || c.Attempt != 1 ||
		!c.LeaseEnd.Equal(b.clock.Now().Add(time.Minute)) || string(c.Payload) != "hello" || c.Message.ID != m.ID {
		t.Fatalf("claim run: %+v", c)
	}
	if _, err := b.w.Complete(b.ctx, alpha.ID, c.Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}

	// The slot was used: the next message's alpha delivery is woken.
	b.ingest(t)
	if got := b.wake.take(); len(got) != 2 {
		t.Fatalf("wake-ups with no slot free: %v", got)
	}

	// A worker that dies after the commit, before its attempt: the lease
	// runs out and the sweep takes the delivery back.
	k.free["alpha"] = 1
	m = b.ingest(t)
	if ran, _ := k.take(); len(ran) != 1 {
		t.Fatalf("claims run: %d", len(ran))
	}
	b.clock.Advance(time.Minute)
	if kind, err := b.w.ExpireLease(b.ctx, m.Deliveries[0].ID); err != nil || kind != journal.KindDeliveryLeaseExpired {
		t.Fatalf("expire: %q %v", kind, err)
	}
	b.audit(t)
}

// TestHandOffGivesUnusedSlotsBack: a slot reserved for an ingest that
// fails, or for a delivery blocked in its lane, is freed, never run.
func TestHandOffGivesUnusedSlotsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	b.fifoTarget(t, "hl7", lifecycle.OnFailureBlock)
	k := &taker{free: map[string]int{"alpha": 10, "hl7": 10}, lease: time.Minute}
	b.w.SetTaker(k)

	// The second message of a key is blocked behind the first, which is
	// claimed: its slot is freed, and it has no wake-up.
	first, second := b.ingestKeyed(t, "k"), b.ingestKeyed(t, "k")
	if first.Deliveries[1].State != lifecycle.StateDelivering || second.Deliveries[1].State != lifecycle.StateBlocked {
		t.Fatalf("hl7 deliveries: %s then %s", first.Deliveries[1].State, second.Deliveries[1].State)
	}
	// A lane's head in flight, claimed at its dispatch, and one blocked.
	b.audit(t)
	ran, free := k.take()
	if len(ran) != 3 || free["alpha"] != 8 || free["hl7"] != 9 {
		t.Fatalf("claims run %d, free slots %v", len(ran), free)
	}
	b.wake.take()

	// A repeated idempotency key stores nothing, alone or in a batch that
	// is written again one message at a time.
	in := newMessage()
	in.IdempotencyKey = "once"
	if _, created, err := b.w.Ingest(b.ctx, in); err != nil || !created {
		t.Fatal(created, err)
	}
	if _, created, err := b.w.Ingest(b.ctx, in); err != nil || created {
		t.Fatal(created, err)
	}
	var many []commands.NewMessage
	for i := range 4 {
		m := newMessage()
		m.IdempotencyKey = fmt.Sprintf("many-%d", i%3)
		many = append(many, m)
	}
	created := 0
	for _, r := range b.w.IngestMany(b.ctx, many) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Created {
			created++
		}
	}
	// Each message stored has a delivery to both targets.
	ran, free = k.take()
	if stored := 1 + created; created != 3 || len(ran) != 2*stored || free["alpha"] != 8-stored || free["hl7"] != 9-stored {
		t.Fatalf("created %d, claims run %d, free slots %v", created, len(ran), free)
	}
	for _, c := range ran {
		m, err := projection.Load(b.ctx, b.db, c.Message.ID)
		if err != nil || m.Delivery(c.Delivery.ID).ClaimToken != c.Token {
			t.Fatalf("claim run %s is not the delivery's: %v", c.Delivery.ID, err)
		}
	}
	b.audit(t)
}

// TestDropTakerEndsOnlyItsOwn: a taker that another replaced drops nothing
// when it stops; the one in place takes until it drops itself.
func TestDropTakerEndsOnlyItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	first := &taker{free: map[string]int{"alpha": 10}, lease: time.Minute}
	second := &taker{free: map[string]int{"alpha": 10}, lease: time.Minute}
	b.w.SetTaker(first)
	b.w.SetTaker(second)
	b.w.DropTaker(first)
	b.ingest(t)
	if ran, _ := second.take(); len(ran) != 1 || len(b.wake.take()) != 0 {
		t.Fatalf("the taker in place ran %d claims", len(ran))
	}
	b.audit(t) // its claim in flight
	b.w.DropTaker(second)
	b.ingest(t)
	if ran, _ := second.take(); len(ran) != 0 || len(b.wake.take()) != 1 {
		t.Fatalf("a dropped taker ran %d claims", len(ran))
	}
	if ran, _ := first.take(); len(ran) != 0 {
		t.Fatalf("the replaced taker ran %d claims", len(ran))
	}
}
