package projection

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// LaneID names a lane: a target and an ordering key.
type LaneID struct {
	Target string
	Key    string
}

func (id LaneID) String() string { return fmt.Sprintf("lane %s/%q", id.Target, id.Key) }

// Lane is the state of one lane of a fifo target: a row of the lanes table.
// A lane with no head and nothing waiting has no row.
type Lane struct {
	LaneID
	// LastSeq is the place of the last delivery put in the lane.
	LastSeq int64
	// Head is the delivery that holds the lane, of message HeadMessage,
	// since HeadSince; uuid.Nil when none does.
	Head, HeadMessage uuid.UUID
	HeadSince         time.Time
	// HeadSettled says the head settled for its lane (delivered, skipped,
	// or failed when placed under on_failure continue) and passes the lane
	// to the first delivery waiting, in the same transaction, whatever its
	// target's ordering is then.
	HeadSettled bool
	// Waiting counts the deliveries blocked behind the head; WaitingSince is
	// when the first of them began to wait behind it.
	Waiting      int64
	WaitingSince time.Time
	// Held says delivery.lane_held was recorded for this head.
	Held bool
}

func (l *Lane) empty() bool { return l.Head == uuid.Nil && l.Waiting == 0 }

// Waiter is a blocked delivery of a lane, at its place.
type Waiter struct {
	Seq      int64
	Delivery uuid.UUID
	Message  uuid.UUID
}

// LaneUnknownError: a command needed a lane, or the first delivery waiting
// in it, that its transaction did not read.
type LaneUnknownError struct {
	Lane LaneID
	// Waiting says the lane was read, but the delivery now first in it was
	// not: an earlier command of the same transaction let the one read go.
	Waiting bool
}

func (e *LaneUnknownError) Error() string {
	if e.Waiting {
		return fmt.Sprintf("the first delivery waiting in %s was not read", e.Lane)
	}
	return fmt.Sprintf("%s was not read", e.Lane)
}

// LaneBook follows the lanes as events move their deliveries: Apply folds
// an event's effect on its lane and checks that it keeps the lane's order.
// It is the one place the lane rules live: a command keeps the lanes its
// transaction read with it and decides with it, and the audit and the
// rebuild fold the whole journal through it.
type LaneBook struct {
	// policy is a target's ordering when an event is folded: as the
	// configuration is now for a command, as the configuration events
	// before it left it for the audit. A delivery's lane rules are the
	// ones it was placed under; the policy decides only where new
	// deliveries go and whether a target still keeps order at all.
	policy func(target string) lifecycle.Ordering
	// delivery is a delivery as the fold has it now, nil when unknown.
	delivery func(message, delivery uuid.UUID) *Delivery
	lanes    map[LaneID]*laneState
	// whole says every waiting delivery of every lane is known, as in a
	// fold of the whole journal; a command knows only what it read.
	whole   bool
	changed map[LaneID]bool
	// left are the deliveries let go out of turn, by a target that kept no
	// order then, until one is placed in a lane again: each is claimed as
	// any delivery, whatever its target keeps since.
	left map[uuid.UUID]bool
}

// laneState is a lane with its first waiting deliveries, in order, as far
// as they are known.
type laneState struct {
	Lane
	waiters []Waiter
	// removedHead says, in a fold of the whole journal, that a delivery the
	// journal no longer holds (retention removed its message) held the lane
	// when the fold met it: the lane has no Head the fold knows.
	removedHead bool
}

// removedError is a lane rule an event broke in a fold of the whole
// journal, which deliveries retention removed would explain: placed behind
// a head, at a place, or let go after a head the journal no longer holds
// (docs/retention.md). The book takes the event as they explain it; the
// audit reports the error only when the journal records no removal.
type removedError struct{ err error }

func (e *removedError) Error() string { return e.err.Error() }
func (e *removedError) Unwrap() error { return e.err }

// NewLaneBook returns an empty book. whole says it will see every event
// of the journal from the start.
func NewLaneBook(policy func(string) lifecycle.Ordering, delivery func(message, delivery uuid.UUID) *Delivery, whole bool) *LaneBook {
	return &LaneBook{policy: policy, delivery: delivery, lanes: map[LaneID]*laneState{}, whole: whole, changed: map[LaneID]bool{},
		left: map[uuid.UUID]bool{}}
}

// Load enters a lane as a command read it.
func (b *LaneBook) Load(r LaneRead) {
	b.lanes[r.Lane.LaneID] = &laneState{Lane: r.Lane, waiters: slices.Clone(r.First)}
}

// lane returns the state of id; an unread lane is an error in a command.
func (b *LaneBook) lane(id LaneID) (*laneState, error) {
	l := b.lanes[id]
	if l == nil {
		if !b.whole {
			return nil, &LaneUnknownError{Lane: id}
		}
		l = &laneState{Lane: Lane{LaneID: id}}
		b.lanes[id] = l
	}
	return l, nil
}

// Place says where a new delivery (or one that joins again) goes in the
// lane of target and key: the next place, blocked when the lane has a head
// or deliveries waiting, under the target's on_failure now. A target that
// keeps no order, or a message without a key, puts it in no lane (the
// zero journal.Lane).
func (b *LaneBook) Place(target, key string) (journal.Lane, error) {
	policy := b.policy(target)
	if key == "" || !policy.FIFO() {
		return journal.Lane{}, nil
	}
	l, err := b.lane(LaneID{target, key})
	if err != nil {
		return journal.Lane{}, err
	}
	return journal.Lane{LaneSeq: l.LastSeq + 1, Blocked: !l.empty(), Continue: policy.OnFailure == lifecycle.OnFailureContinue}, nil
}

// Lane returns a lane's state.
func (b *LaneBook) Lane(id LaneID) (Lane, error) {
	l, err := b.lane(id)
	if err != nil {
		return Lane{}, err
	}
	return l.Lane, nil
}

// Head reports whether the delivery holds its lane: it is the lane's head
// and has not settled for it.
func (b *LaneBook) Head(id LaneID, delivery uuid.UUID) (bool, error) {
	l, err := b.lane(id)
	if err != nil {
		return false, err
	}
	return l.Head == delivery && !l.HeadSettled, nil
}

// Owed returns the delivery a lane owes its unblocking, with the head
// that lets it go: the first one waiting, once the head has settled for
// the lane or there is none. ok is false when nothing is owed.
//
// A lane is owed its pass-on whatever the target's ordering is when its
// head settles: the lane and the lock it was read under say who waits
// behind whom, while the configuration a command decides with may lag a
// change (another process's cache) or see one that is undone before the
// sweep lets the lane's deliveries go. A target that keeps no order any
// more has the rest of its blocked deliveries let go by the sweep.
func (b *LaneBook) Owed(id LaneID) (next Waiter, head uuid.UUID, ok bool, err error) {
	l := b.lanes[id]
	if l == nil || l.Waiting == 0 || !b.headSettled(l) {
		return Waiter{}, uuid.Nil, false, nil
	}
	if len(l.waiters) == 0 {
		return Waiter{}, uuid.Nil, false, &LaneUnknownError{Lane: id, Waiting: true}
	}
	return l.waiters[0], l.Head, true, nil
}

// OwedLanes lists the lanes that owe a delivery its unblocking now (see
// Owed), in (target, key) order.
func (b *LaneBook) OwedLanes() []LaneID {
	var out []LaneID
	for id, l := range b.lanes {
		if l.Waiting > 0 && b.headSettled(l) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, compareLaneIDs)
	return out
}

// headSettled reports whether the lane's head lets the next go: it has
// settled for the lane under the policy it was placed under, or there is
// none.
func (b *LaneBook) headSettled(l *laneState) bool {
	if l.Head == uuid.Nil {
		return true
	}
	d := b.delivery(l.HeadMessage, l.Head)
	return d != nil && laneSettled(d, d.State)
}

// laneSettled reports whether d, in state s, lets the next of its lane go.
func laneSettled(d *Delivery, s lifecycle.DeliveryState) bool {
	onFailure := lifecycle.OnFailureBlock
	if d.LaneContinue {
		onFailure = lifecycle.OnFailureContinue
	}
	return lifecycle.LaneSettled(s, onFailure)
}

// Changed lists the lanes Apply changed since the last call, each with
// its state: a lane that is empty now is to be removed.
func (b *LaneBook) Changed() []Lane {
	out := make([]Lane, 0, len(b.changed))
	for id := range b.changed {
		out = append(out, b.lanes[id].Lane)
	}
	clear(b.changed)
	slices.SortFunc(out, func(a, c Lane) int { return compareLaneIDs(a.LaneID, c.LaneID) })
	return out
}

// All lists every lane that has a row, in (target, key) order.
func (b *LaneBook) All() []Lane {
	var out []Lane
	for _, l := range b.lanes {
		if !l.empty() {
			out = append(out, l.Lane)
		}
	}
	slices.SortFunc(out, func(a, c Lane) int { return compareLaneIDs(a.LaneID, c.LaneID) })
	return out
}

func compareLaneIDs(a, b LaneID) int {
	if a.Target != b.Target {
		if a.Target < b.Target {
			return -1
		}
		return 1
	}
	switch {
	case a.Key < b.Key:
		return -1
	case a.Key > b.Key:
		return 1
	}
	return 0
}

// Stuck lists the lanes whose head settled while deliveries wait behind
// it: each should have passed the lane on in the transaction that settled
// it, whatever its target's ordering then (see Owed).
func (b *LaneBook) Stuck() []Lane {
	var out []Lane
	for _, l := range b.lanes {
		if l.Waiting > 0 && l.HeadSettled {
			out = append(out, l.Lane)
		}
	}
	slices.SortFunc(out, func(a, c Lane) int { return compareLaneIDs(a.LaneID, c.LaneID) })
	return out
}

// Apply folds e's effect on the lanes, m being e's message after e, and
// checks that e keeps its lane's order: a delivery placed at the next place
// of its lane and blocked exactly when the lane is held; only the head
// claimed (or a delivery let go out of turn), redelivered in place or
// reported held; a blocked delivery
// unblocked only when it is the first waiting and the head has settled for
// the lane (or its target keeps no order any more). On an error the lanes
// are unchanged.
func (b *LaneBook) Apply(e journal.Event, m *Message) error {
	switch p := e.Payload.(type) {
	case *journal.MessageDispatched:
		return b.placeAll(m, p.Deliveries, e.RecordedAt)
	case *journal.MessageRedispatched:
		return b.placeAll(m, p.Deliveries, e.RecordedAt)
	case *journal.MessageResent:
		// The new generation joins the back of its lanes, then the old
		// deliveries it supersedes let their lanes go.
		explained, err := explainedOnly(b.placeAll(m, p.Deliveries, e.RecordedAt))
		if err != nil {
			return err
		}
		for _, id := range p.Superseded {
			if d := m.Delivery(id); d != nil && d.LaneSeq > 0 {
				l, err := b.lane(LaneID{d.Target, d.LaneKey})
				if err != nil {
					return err
				}
				b.settle(l, d, d.State)
			}
		}
		return explained
	}
	if !e.Kind().Delivery() {
		return nil
	}
	d := m.Delivery(e.DeliveryID)
	if d == nil || d.LaneSeq == 0 {
		return nil
	}
	id := LaneID{d.Target, d.LaneKey}
	l, err := b.lane(id)
	if err != nil {
		return err
	}
	fifo := b.policy(id.Target).FIFO()
	switch p := e.Payload.(type) {
	case *journal.DeliveryRedelivered:
		if p.LaneSeq > 0 {
			if l.Head == d.ID && !l.HeadSettled {
				return fmt.Errorf("%s: delivery %s holds its lane and is redelivered in place, not at the back", id, d.ID)
			}
			return b.place(id, p.Lane, Waiter{Seq: p.LaneSeq, Delivery: d.ID, Message: m.ID}, e.RecordedAt)
		}
		if fifo && (l.Head != d.ID || l.HeadSettled) {
			return fmt.Errorf("%s: delivery %s does not hold its lane, so it joins the back", id, d.ID)
		}
		return nil
	case *journal.DeliveryUnblocked:
		return b.unblock(id, l, d, m.ID, p, e.RecordedAt)
	case *journal.DeliveryLaneHeld:
		if l.Head != d.ID {
			return fmt.Errorf("%s: delivery %s is reported holding its lane, but %s does", id, d.ID, l.Head)
		}
		l.Held = true
		b.changed[id] = true
		return nil
	case *journal.DeliveryClaimed:
		if fifo && l.Head != d.ID && !b.left[d.ID] {
			return fmt.Errorf("%s: delivery %s was claimed while %s held its lane", id, d.ID, l.Head)
		}
		return nil
	}
	if e.OldState == lifecycle.StateBlocked && e.NewState != lifecycle.StateBlocked {
		// A delivery skipped while it waited leaves the lane.
		return b.leave(id, l, d.ID)
	}
	b.settle(l, d, e.NewState)
	return nil
}

// settle notes that d, now in state s, settled for its lane when it is the
// lane's head and s lets the next go; a lane with nothing waiting is freed.
func (b *LaneBook) settle(l *laneState, d *Delivery, s lifecycle.DeliveryState) {
	if l.Head != d.ID || l.HeadSettled || !laneSettled(d, s) {
		return
	}
	l.HeadSettled = true
	if l.Waiting == 0 {
		b.free(l)
	}
	b.changed[l.LaneID] = true
}

// placeAll puts the new deliveries of a dispatch in their lanes. A
// placement that removed deliveries explain does not stop the others; the
// first such is returned once all are placed.
func (b *LaneBook) placeAll(m *Message, add []journal.NewDelivery, at time.Time) error {
	var explained error
	for _, nd := range add {
		if nd.LaneSeq == 0 {
			continue
		}
		e, err := explainedOnly(b.place(LaneID{nd.Target, m.OrderingKey}, nd.Lane, Waiter{Seq: nd.LaneSeq, Delivery: nd.ID, Message: m.ID}, at))
		if err != nil {
			return err
		}
		if explained == nil {
			explained = e
		}
	}
	return explained
}

// explainedOnly splits err into a removedError, which the book took, and
// any other error.
func explainedOnly(err error) (explained, other error) {
	var r *removedError
	if errors.As(err, &r) {
		return err, nil
	}
	return nil, err
}

// place puts w in lane id at the place p says, checking it is the next
// place and blocked exactly when the lane is held. Whether its target kept
// order then is the placing command's view of the configuration, which may
// lag a change by a little; the lane's order holds either way.
func (b *LaneBook) place(id LaneID, p journal.Lane, w Waiter, at time.Time) error {
	l, err := b.lane(id)
	if err != nil {
		return err
	}
	var broken error
	switch {
	case p.LaneSeq != l.LastSeq+1:
		broken = fmt.Errorf("%s: delivery %s is put at %d, the next place is %d", id, w.Delivery, p.LaneSeq, l.LastSeq+1)
	case p.Blocked == l.empty():
		broken = fmt.Errorf("%s: delivery %s is put in the lane %s, but %s", id, w.Delivery,
			map[bool]string{true: "blocked", false: "as its head"}[p.Blocked], l.holder())
	}
	if broken != nil {
		if !b.removalExplains(l, p) {
			return broken
		}
		broken = &removedError{broken}
		if p.Blocked && l.empty() {
			l.removedHead = true
		}
	}
	l.LastSeq = p.LaneSeq
	delete(b.left, w.Delivery)
	if p.Blocked {
		if b.whole || len(l.waiters) == int(l.Waiting) {
			l.waiters = append(l.waiters, w)
		}
		l.Waiting++
		if l.Waiting == 1 {
			l.WaitingSince = at
		}
	} else {
		l.Head, l.HeadMessage, l.HeadSince, l.HeadSettled, l.Held = w.Delivery, w.Message, at, false, false
		l.removedHead = false
	}
	b.changed[id] = true
	return broken
}

// removalExplains reports whether deliveries the journal no longer holds
// explain a placement at p that breaks the lane's rules as the fold has
// them, in a fold of the whole journal: removed deliveries took the places
// between (a gap); one holds the lane (a delivery put blocked into a lane
// the fold has empty); or the removed one that held it settled with
// nothing waiting, and the lane began again (any placement). A placement
// that contradicts what live deliveries show is never explained.
func (b *LaneBook) removalExplains(l *laneState, p journal.Lane) bool {
	switch {
	case !b.whole:
		return false
	case l.removedHead && l.Waiting == 0:
		return true
	case p.Blocked && l.empty():
		return true
	}
	return p.Blocked != l.empty() && p.LaneSeq > l.LastSeq+1
}

// holder says who holds the lane, for errors.
func (l *laneState) holder() string {
	if l.empty() {
		return "nothing holds the lane"
	}
	return fmt.Sprintf("%s holds the lane with %d waiting", l.Head, l.Waiting)
}

// unblock moves the first delivery waiting to the head, behind a head that
// has settled for the lane; a target that keeps no order any more lets any
// waiting delivery go (p.After is none then).
func (b *LaneBook) unblock(id LaneID, l *laneState, d *Delivery, message uuid.UUID, p *journal.DeliveryUnblocked, at time.Time) error {
	if p.After == uuid.Nil {
		if b.policy(id.Target).FIFO() {
			return fmt.Errorf("%s: delivery %s is unblocked out of turn, but its target keeps order", id, d.ID)
		}
		if err := b.leave(id, l, d.ID); err != nil {
			return err
		}
		b.left[d.ID] = true
		return nil
	}
	var broken error
	if l.Head != p.After {
		broken = fmt.Errorf("%s: delivery %s is unblocked after %s, but %s holds the lane", id, d.ID, p.After, l.Head)
		// A removed delivery held the lane, or took it after the head the
		// fold knows had settled for it, and let this one go.
		if !b.whole || !l.removedHead && !l.HeadSettled {
			return broken
		}
		broken = &removedError{broken}
	}
	switch {
	case broken == nil && !b.headSettled(l):
		return fmt.Errorf("%s: delivery %s is unblocked while %s, ahead of it, has not settled for the lane", id, d.ID, l.Head)
	case len(l.waiters) == 0:
		if !b.whole {
			return &LaneUnknownError{Lane: id, Waiting: true}
		}
		return fmt.Errorf("%s: delivery %s is unblocked, but nothing waits in the lane", id, d.ID)
	case l.waiters[0].Delivery != d.ID:
		return fmt.Errorf("%s: delivery %s is unblocked before %s, which waits ahead of it", id, d.ID, l.waiters[0].Delivery)
	}
	l.waiters = l.waiters[1:]
	l.Waiting--
	l.Head, l.HeadMessage, l.HeadSince, l.HeadSettled, l.Held = d.ID, message, at, false, false
	l.removedHead = false
	if l.Waiting > 0 {
		l.WaitingSince = at
	} else {
		l.WaitingSince = time.Time{}
	}
	b.changed[id] = true
	return broken
}

// leave takes a waiting delivery out of its lane: skipped, or let go by a
// target that keeps no order any more.
func (b *LaneBook) leave(id LaneID, l *laneState, delivery uuid.UUID) error {
	if l.Waiting == 0 {
		return fmt.Errorf("%s: delivery %s leaves the lane, but nothing waits in it", id, delivery)
	}
	i := slices.IndexFunc(l.waiters, func(w Waiter) bool { return w.Delivery == delivery })
	if i >= 0 {
		l.waiters = slices.Delete(l.waiters, i, i+1)
	} else if b.whole {
		return fmt.Errorf("%s: delivery %s leaves the lane, but it does not wait in it", id, delivery)
	}
	l.Waiting--
	if l.Waiting == 0 {
		l.WaitingSince = time.Time{}
		if l.HeadSettled {
			b.free(l)
		}
	}
	b.changed[id] = true
	return nil
}

// free ends the lane's hold: no head, and, with nothing waiting, no row.
func (b *LaneBook) free(l *laneState) {
	l.Head, l.HeadMessage, l.HeadSince, l.HeadSettled, l.Held = uuid.Nil, uuid.Nil, time.Time{}, false, false
	l.removedHead = false
	if l.Waiting == 0 {
		// An empty lane has no row; its places start again from 1.
		l.LastSeq = 0
	}
}
