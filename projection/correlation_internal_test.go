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
			if problem := correlate(all, at, events[i], events[i].DeliveryID); problem != "" {
				t.Fatal(problem)
			}
		}
		if got := all[key]; got.DeliveryID != second || at[key] != 101 {
			t.Errorf("folded in order %v: %+v at %d, want delivery %s at 101", order, got, at[key], second)
		}
	}
}
