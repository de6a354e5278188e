package commands

import (
	"time"

	"github.com/google/uuid"
)

// Taker holds slots of the workers of this process, so that an ingest can
// claim the deliveries it dispatches for them in its own transaction: the
// worker attempts each once it commits, with no wake-up and no claim
// transaction in between. workers.Runtime is the Taker of its Writer.
type Taker interface {
	// Reserve holds a free slot of the target's worker, or reports false
	// when it has none free or work is waiting for one. It must not block:
	// the batch that calls it holds its rows locked.
	Reserve(target string) (Slot, bool)
}

// Slot is a worker's slot that Taker.Reserve held for one claim. Exactly
// one of Run and Free is called on it.
type Slot interface {
	// Lease is the lease of the claim made for the slot.
	Lease() time.Duration
	// Run attempts the claim, which is committed.
	Run(Claim)
	// Free gives the slot back unused.
	Free()
}

// SetTaker makes t the taker of the deliveries this Writer's ingests
// dispatch, in place of any other.
func (w *Writer) SetTaker(t Taker) { w.taker.Store(&t) }

// DropTaker ends t's taking, leaving every delivery to its wake-up, if t
// is still the taker: one that another replaced has nothing to end. Takers
// are compared with ==, so t's dynamic type must be comparable (a pointer,
// as a Runtime is).
func (w *Writer) DropTaker(t Taker) {
	if p := w.taker.Load(); p != nil && *p == t {
		w.taker.CompareAndSwap(p, nil)
	}
}

// handed is a claim an op made for the slot it reserved of the target's
// worker.
type handed struct {
	target     string
	deliveryID uuid.UUID
	claim      Claim
}

// handOff claims, on c, each delivery c wakes whose target's worker in
// this process has a slot free (Taker) and that is not off, instead of
// waking it. The op keeps the slots it reserved for a later decision of
// the same batch, as a batch may decide again.
func (w *Writer) handOff(o *op, c *change, now time.Time, off func(target string) bool) {
	t := w.taker.Load()
	if t == nil {
		return
	}
	var woken []Wakeup
	for _, wk := range c.wakeups {
		if off(wk.Target) {
			woken = append(woken, wk)
			continue
		}
		s, ok := o.slots[wk.Target]
		if !ok {
			if s, ok = (*t).Reserve(wk.Target); !ok {
				woken = append(woken, wk)
				continue
			}
			if o.slots == nil {
				o.slots = map[string]Slot{}
			}
			o.slots[wk.Target] = s
		}
		claim, err := c.claim(wk.DeliveryID, uuid.New(), s.Lease(), now)
		if err != nil {
			// Not claimable after all (blocked in its lane): left to its
			// wake-up.
			woken = append(woken, wk)
			continue
		}
		o.handed = append(o.handed, handed{target: wk.Target, deliveryID: wk.DeliveryID, claim: claim})
	}
	c.wakeups = woken
}

// handOver runs, once o's batch has ended, the claims it committed in
// their slots, and gives every other slot it reserved back. A batch that
// failed for a reason that can pass may have committed all the same, its
// answer lost: each claim it made that holds its delivery is run too,
// where it would otherwise wait out its lease.
func (w *Writer) handOver(o *op) {
	switch {
	case o.err == nil && o.c != nil:
		for _, h := range o.handed {
			claim := h.claim
			claim.Message, claim.Delivery, claim.Payload = o.c.after, *o.c.after.Delivery(h.deliveryID), o.c.body
			claim.Shape = shapeOf(o.c.shapes, h.deliveryID)
			o.slots[h.target].Run(claim)
			delete(o.slots, h.target)
		}
	case len(o.handed) > 0 && Transient(o.err):
		claims := make([]Claim, len(o.handed))
		for i, h := range o.handed {
			claims[i] = h.claim
		}
		held, _ := w.claimsHeld(o.ctx, claims, o.err)
		for _, c := range held {
			o.slots[c.Delivery.Target].Run(c)
			delete(o.slots, c.Delivery.Target)
		}
	}
	for _, s := range o.slots {
		s.Free()
	}
	o.slots, o.handed = nil, nil
}
