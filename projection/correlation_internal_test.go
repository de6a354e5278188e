package projection

import (
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// TestCorrelationIsTheGreatestPositions: two deliveries that take one
// receiver's id leave it to the one whose event has the greater position,
// folded in either order, as an online rebuild's catch-up may fold a pair
// of transactions whose ids are the other way round.
func TestCorrelationIsTheGreatestPositions(t *testing.T) {
	key := CorrelationKey{Target: "alpha", ExternalID: "ext-1"}
	first, second := uuid.New(), uuid.New()
	handOver := func(position int64, delivery uuid.UUID) journal.Event {
		return journal.Event{Position: position, Target: key.Target, DeliveryID: delivery,
			Payload: &journal.DeliveryAttempted{Outcome: lifecycle.Outcome{Kind: lifecycle.OutcomeAwaitingAck, ExternalID: key.ExternalID}}}
	}
	events := []journal.Event{handOver(100, first), handOver(101, second)}
	for _, order := range [][]int{{0, 1}, {1, 0}} {
		all, at := map[CorrelationKey]Correlation{}, map[CorrelationKey]int64{}
		for _, i := range order {
			if problem := correlate(all, at, map[uuid.UUID]journal.HandOver{}, events[i], events[i].DeliveryID); problem != "" {
				t.Fatal(problem)
			}
		}
		if got := all[key]; got.DeliveryID != second || at[key] != 101 {
			t.Errorf("folded in order %v: %+v at %d, want delivery %s at 101", order, got, at[key], second)
		}
	}
}

// TestSupersededReceipt: a negative receipt refused as superseded must
// name the delivery's last hand-over, made under another id than the
// receipt's, whose own correlation is open.
func TestSupersededReceipt(t *testing.T) {
	delivery := uuid.New()
	handOver := func(position int64, version int, id string) journal.Event {
		return journal.Event{Position: position, Version: version, Target: "sms", DeliveryID: delivery,
			Payload: &journal.DeliveryAttempted{Attempt: version, Outcome: lifecycle.Outcome{Kind: lifecycle.OutcomeAwaitingAck, ExternalID: id}}}
	}
	refused := func(id string, by int) journal.Event {
		return journal.Event{Position: 100, Version: 9, Target: "sms", DeliveryID: delivery,
			Payload: &journal.ReceiptRefused{Receipt: journal.Receipt{ExternalID: id}, Reason: "superseded", SupersededBy: by}}
	}
	for _, c := range []struct {
		name  string
		event journal.Event
		ok    bool
	}{
		{"by the last hand-over", refused("SM-1", 7), true},
		{"by the hand-over that gave the id", refused("SM-1", 3), false},
		{"by a version that handed nothing over", refused("SM-1", 8), false},
		{"the last hand-over's own id", refused("SM-2", 7), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			all, at, handed := map[CorrelationKey]Correlation{}, map[CorrelationKey]int64{}, map[uuid.UUID]journal.HandOver{}
			for _, e := range []journal.Event{handOver(10, 3, "SM-1"), handOver(20, 7, "SM-2"), c.event} {
				if problem := correlate(all, at, handed, e, uuid.Nil); (problem == "") != (c.ok || e.Position != 100) {
					t.Fatalf("event at %d: %q", e.Position, problem)
				}
			}
		})
	}
}
