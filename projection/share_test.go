package projection_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/projection"
)

// TestSharesCoverEveryIDOnce checks that the shares of the tables' check
// hold every id once and about as many each, and that the SQL of each
// selects the ids it holds. The ids are of version 7, as the Writer makes
// them: alike in their first bytes.
func TestSharesCoverEveryIDOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := make([]uuid.UUID, 256)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		ids[i][15] = byte(i)
	}
	for n := 1; n <= 7; n++ {
		shares := projection.ShareIDs(n)
		for i, sh := range shares {
			rows, err := b.db.Query(b.ctx, fmt.Sprintf(`SELECT m.id FROM unnest($%d::uuid[]) AS m(id)`, len(sh.Args)+1)+sh.Where,
				append(sh.Args, ids)...)
			if err != nil {
				t.Fatal(err)
			}
			selected, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				t.Fatal(err)
			}
			held := slices.DeleteFunc(slices.Clone(ids), func(id uuid.UUID) bool { return !sh.Holds(id) })
			if !slices.Equal(selected, held) {
				t.Errorf("%d shares, share %d: the SQL selects %d ids, the share holds %d", n, i, len(selected), len(held))
			}
			if len(held) < len(ids)/n-1 {
				t.Errorf("%d shares, share %d: holds %d of %d ids", n, i, len(held), len(ids))
			}
		}
		for i, id := range ids {
			held := 0
			for _, sh := range shares {
				if sh.Holds(id) {
					held++
				}
			}
			if held != 1 {
				t.Errorf("%d shares: last byte %d held %d times", n, i, held)
			}
		}
	}
}
