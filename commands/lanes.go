package commands

import (
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
)

// A batch keeps the lanes of fifo targets in step with the deliveries its
// ops move, in the same transaction: a dispatch places its deliveries in
// their lanes, a head that settles for its lane passes it to the first
// delivery waiting, which is unblocked and woken. The rules are the
// projection.LaneBook's; this file gives it the lanes a batch reads.
//
// A lane is read only when an op needs it: the batch decides its ops, and
// when one needs a lane it has not read, it locks and reads those lanes and
// decides every op again. The lock is a transaction-level advisory lock on
// the lane (it may have no row yet), taken after the message rows and in a
// fixed order, so two batches never wait for each other in a cycle; a
// batch that needs more lanes after its first read may, and then
// PostgreSQL ends one of them and it runs again. The messages of the
// deliveries first waiting in the lanes of the deliveries an op names are
// locked with the op's own (projection.Lock), so a head's settling
// finds the next one's message locked and read.

// Errors that end a batch's decision on lanes.
var (
	// errLaneRace: a lane moved between the lock of the messages and the
	// read of the lane (its first waiting delivery is on a message this
	// batch did not lock); the batch reads again.
	errLaneRace = errors.New("a lane moved while it was read")
	// errLaneSplit: two ops of the batch move one lane further than the
	// batch read; each op runs alone.
	errLaneSplit = errors.New("ops of one batch move one lane twice")
)

// newLaneBook is a book of the lanes read, following the deliveries of
// state, under the targets' ordering as cfg has it.
func newLaneBook(cfg *configState, state map[uuid.UUID]*projection.Message, read []projection.LaneRead) *projection.LaneBook {
	book := projection.NewLaneBook(
		func(target string) lifecycle.Ordering { return cfg.targets[target].Ordering },
		func(message, delivery uuid.UUID) *projection.Delivery {
			if m := state[message]; m != nil {
				return m.Delivery(delivery)
			}
			return nil
		}, false)
	for _, r := range read {
		book.Load(r)
	}
	return book
}

// queueLanes queues the lock of the lanes, in the order of their hash, and
// their read; the function returned gives them once the batch is read.
func queueLanes(b *pgx.Batch, ids []projection.LaneID) func() []projection.LaneRead {
	slices.SortFunc(ids, func(a, c projection.LaneID) int {
		if a.Target != c.Target {
			return compareStrings(a.Target, c.Target)
		}
		return compareStrings(a.Key, c.Key)
	})
	ids = slices.Compact(ids)
	targets, keys := make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		targets[i], keys[i] = id.Target, id.Key
	}
	b.Queue(`SELECT pg_advisory_xact_lock($3::int, h) FROM (
			SELECT DISTINCT hashtext(t || chr(31) || k) AS h FROM unnest($1::text[], $2::text[]) AS x(t, k)
			ORDER BY h OFFSET 0) l`, targets, keys, int32(schema.ClassLane))
	return projection.QueueLoadLanes(b, targets, keys)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// movesLane reports whether e can move a lane: place a delivery in one,
// let one go, or settle a head. A command folds only those into its lanes,
// so a claim or a retry of a head needs no lane read.
func movesLane(e journal.Event) bool {
	switch e.Payload.(type) {
	case *journal.MessageDispatched, *journal.MessageRedispatched, *journal.MessageResent, *journal.DeliveryRedelivered,
		*journal.DeliveryUnblocked, *journal.DeliverySkipped, *journal.DeliveryLaneHeld:
		return true
	}
	return e.Kind().Delivery() && e.OldState != e.NewState && e.NewState.Final()
}

// keepLanes folds the lane moves of c's events into book, then records on
// the messages of state the unblocking each lane owes: the first delivery
// waiting behind a head that settled for its lane is queued and woken.
// It returns the changes it made on those messages.
func keepLanes(book *projection.LaneBook, c *change, state map[uuid.UUID]*projection.Message, now time.Time) ([]*change, error) {
	// The book reads the deliveries' states from state: c's are its own.
	state[c.after.ID] = c.after
	for _, e := range c.events {
		if movesLane(e) {
			if err := book.Apply(e, c.after); err != nil {
				return nil, laneError(err)
			}
		}
	}
	var follow []*change
	for {
		owed := book.OwedLanes()
		if len(owed) == 0 {
			return follow, nil
		}
		for _, id := range owed {
			next, head, ok, err := book.Owed(id)
			if err != nil {
				return nil, laneError(err)
			}
			if !ok {
				continue
			}
			m := state[next.Message]
			if m == nil {
				return nil, errLaneRace
			}
			f := newChange(m)
			e := journal.Event{RecordedAt: now, DeliveryID: next.Delivery, Actor: journal.ActorSystem,
				Payload: &journal.DeliveryUnblocked{DispatchCount: 1, NextDue: now.Add(lifecycle.DispatchBackoff(1)), After: head}}
			if err := f.record(e); err != nil {
				return nil, errLaneRace
			}
			if err := book.Apply(f.events[len(f.events)-1], f.after); err != nil {
				return nil, laneError(err)
			}
			f.wakeups = append(f.wakeups, Wakeup{DeliveryID: next.Delivery, Target: id.Target})
			state[f.after.ID] = f.after
			follow = append(follow, f)
		}
	}
}

// laneError sorts a lane book's refusal: a lane not read is for the batch
// to read; the next delivery of a lane not read is for each op to run
// alone; anything else means the lanes read no longer match the messages
// locked.
func laneError(err error) error {
	var unknown *projection.LaneUnknownError
	switch {
	case errors.As(err, &unknown) && unknown.Waiting:
		return errLaneSplit
	case errors.As(err, &unknown):
		return err
	}
	return errLaneRace
}

// claimFreed claims, with token and lease, the first delivery to target that follow
// lets go of its lane, for the worker whose outcome let it go; its wake-up
// is dropped, as nobody else is to claim it. It returns the claim and the
// change that holds it, or nil when follow frees none that may be claimed.
func claimFreed(follow []*change, target string, token uuid.UUID, lease time.Duration, now time.Time) (*Claim, *change) {
	for _, f := range follow {
		for i, wk := range f.wakeups {
			if wk.Target != target {
				continue
			}
			claim, err := f.claim(wk.DeliveryID, token, lease, now)
			if err != nil {
				// Not claimable after all: left to its wake-up.
				continue
			}
			f.wakeups = slices.Delete(f.wakeups, i, i+1)
			f.readBody = true
			claim.Delivery = *f.after.Delivery(wk.DeliveryID)
			return &claim, f
		}
	}
	return nil, nil
}
