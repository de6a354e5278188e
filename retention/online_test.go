package retention_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
)

// TestOnlineRebuildStopsWhenItLosesTheLease: an online rebuild holds the
// retention lease, as the fold holds streams a pass would remove. When the
// session holding it ends during the catch-up (a restart of PostgreSQL, a
// failover), a pass takes the lease and removes settled messages from the
// live tables and the journal; the rebuild, whose shadow tables still hold
// them, stops with schema.ErrLockLost rather than switch them back in. The
// live tables stay those the pass left, the audit is clean, and the next
// rebuild finishes without the removed messages.
func TestOnlineRebuildStopsWhenItLosesTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Second, 0)
	var gone, kept []uuid.UUID
	for range 3 {
		gone = append(gone, b.settle(t, lifecycle.Delivered("200")).ID)
	}
	// The rebuild's own process, with a pool of its own.
	rebuilder, err := pgxpool.NewWithConfig(b.ctx, b.db.Config().Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilder.Close()
	passed := false
	_, err = projection.OnlineRebuild(b.ctx, rebuilder, projection.OnlineOptions{Log: quiet, Pause: func(p projection.OnlinePhase) {
		if p != projection.PhaseCatchUp || passed {
			return
		}
		passed = true
		dbtest.TerminateHolder(t, b.db, schema.KeyRetention)
		b.clock.Advance(time.Second)
		kept = append(kept, b.settle(t, lifecycle.Delivered("200")).ID)
		if r := b.pass(t); r.Settled != len(gone) {
			t.Fatalf("the pass beside the rebuild removed %d messages, want %d: %+v", r.Settled, len(gone), r)
		}
	}})
	if !passed {
		t.Fatal("the rebuild never caught up")
	}
	if !errors.Is(err, schema.ErrLockLost) || !strings.Contains(err.Error(), "the retention lease was lost") {
		t.Fatalf("the rebuild that lost the retention lease ended with %v", err)
	}
	for _, id := range gone {
		b.mustLive(t, id, false)
	}
	b.mustLive(t, kept[0], true)
	b.audit(t)
	r, err := projection.OnlineRebuild(b.ctx, rebuilder, projection.OnlineOptions{Log: quiet})
	if err != nil || len(r.Violations) > 0 || r.Messages != 1 {
		t.Fatalf("the next online rebuild: %v %+v", err, r)
	}
	for _, id := range gone {
		b.mustLive(t, id, false)
	}
	b.audit(t)
}
