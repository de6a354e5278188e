package journal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
)

// TestReadKinds reads only the kinds asked for, after the position given,
// in position order, each with the transaction that wrote it.
func TestReadKinds(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	// One transaction per version: accepted at 1 to 3, dispatched at 4 to 6
	// and 7 to 9.
	appendEvents(t, db, []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}, 1, 3, at)

	events, marks, err := journal.ReadKinds(t.Context(), db, 2, journal.KindMessageAccepted)
	if err != nil || len(events) != 1 || events[0].Position != 3 || events[0].Kind() != journal.KindMessageAccepted {
		t.Fatalf("accepted after 2: %v, %v", events, err)
	}
	if marks[0].Position != 3 {
		t.Fatalf("mark %+v, want position 3", marks[0])
	}

	events, marks, err = journal.ReadKinds(t.Context(), db, 0, journal.KindMessageDispatched, journal.KindDeliveryClaimed)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range events {
		got = append(got, e.Position)
	}
	if fmt.Sprint(got) != "[4 5 6 7 8 9]" {
		t.Fatalf("dispatched at %v, want 4 to 9", got)
	}
	for i, m := range marks {
		if m.Position != got[i] {
			t.Fatalf("mark %d is at %d, its event at %d", i, m.Position, got[i])
		}
		if same := m.TxID == marks[i/3*3].TxID; !same {
			t.Fatalf("position %d: transaction %d, want that of position %d", m.Position, m.TxID, marks[i/3*3].Position)
		}
	}
	if marks[0].TxID == marks[3].TxID {
		t.Fatalf("two appends share the transaction %d", marks[0].TxID)
	}
}
