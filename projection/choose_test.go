package projection_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
)

// TestChooseReadsWhatItLocked: a ChooseSQL statement gives each chosen
// delivery, in the choice's order, with its message read as LoadMany reads
// it; a message it reads at another version than the choice locked, as
// when a writer commits between the statement's snapshot and its lock, it
// leaves for a read of its own.
func TestChooseReadsWhatItLocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ms []*projection.Message
	for range 2 {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	// Every delivery of both messages, the second message's first: two
	// chosen deliveries share each message.
	const choice = `SELECT d.id, d.message_id, d.created_at, m.version %s
		FROM deliveries d JOIN messages m ON m.id = d.message_id
		WHERE d.message_id = ANY($1) ORDER BY d.message_id DESC, d.seq FOR UPDATE OF m, d`
	choose := func(version string) []projection.Chosen {
		t.Helper()
		var chosen []projection.Chosen
		err := pgx.BeginFunc(b.ctx, b.db, func(tx pgx.Tx) error {
			rows, err := tx.Query(b.ctx, projection.ChooseSQL(fmt.Sprintf(choice, version)), []uuid.UUID{ms[0].ID, ms[1].ID})
			if err != nil {
				return err
			}
			chosen, err = projection.ScanChosen(rows)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return chosen
	}

	chosen := choose("")
	var want []projection.Chosen
	for _, m := range []*projection.Message{ms[1], ms[0]} {
		read, err := projection.Load(b.ctx, b.db, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range read.Deliveries {
			want = append(want, projection.Chosen{DeliveryID: d.ID, MessageID: m.ID, Key: d.CreatedAt, Message: read})
		}
	}
	if len(want) != 4 {
		t.Fatalf("%d deliveries, want 4", len(want))
	}
	if len(chosen) != len(want) {
		t.Fatalf("chose %d, want %d", len(chosen), len(want))
	}
	for i := range want {
		got := chosen[i]
		if got.DeliveryID != want[i].DeliveryID || got.MessageID != want[i].MessageID || !got.Key.Equal(want[i].Key) ||
			!reflect.DeepEqual(got.Message, want[i].Message) {
			t.Errorf("chosen %d: %+v\nwant %+v", i, got, want[i])
		}
	}

	// The version locked one ahead of the version read.
	for i, c := range choose("+ 1") {
		if c.Message != nil || c.DeliveryID != want[i].DeliveryID || c.MessageID != want[i].MessageID {
			t.Errorf("chosen %d at another version: %+v, want it unread", i, c)
		}
	}
}
