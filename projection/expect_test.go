package projection_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
)

// TestAnUpdateOfAMessageMovedOnFails: the messages' update of a batch
// stands when every row is still at the version read, and fails as a
// serialization failure, changing nothing, when one has moved on.
func TestAnUpdateOfAMessageMovedOnFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	update := func(read int) error {
		_, err := b.db.Exec(b.ctx, projection.UpdateMessagesSQL, []uuid.UUID{m.ID}, []int{read}, []int{read + 1},
			[]string{"dispatched"}, []*string{nil}, []string{"in_progress"}, []string{""}, []int{2},
			[]time.Time{b.now}, []int{1}, []bool{false})
		return err
	}
	var version int
	if err := b.db.QueryRow(b.ctx, `SELECT version FROM messages WHERE id = $1`, m.ID).Scan(&version); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := update(version - 1); !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("an update read at an older version: %v, want a serialization failure", err)
	}
	if err := update(version); err != nil {
		t.Fatalf("an update read at the row's version: %v", err)
	}
	var now int
	if err := b.db.QueryRow(b.ctx, `SELECT version FROM messages WHERE id = $1`, m.ID).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now != version+1 {
		t.Fatalf("the row is at version %d after the update, want %d", now, version+1)
	}
}
