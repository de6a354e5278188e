package commands_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// countRows returns the rows of the journal, messages, deliveries and payloads.
func (b *bundle) countRows(t *testing.T) [4]int {
	t.Helper()
	var n [4]int
	err := b.db.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM journal), (SELECT count(*) FROM messages),
		(SELECT count(*) FROM deliveries), (SELECT count(*) FROM payloads)`).Scan(&n[0], &n[1], &n[2], &n[3])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCrashWindows ends the database session at each point of a command's
// transaction, as a crash of the process would: nothing half-written
// survives, and the command reports the failure.
func TestCrashWindows(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"projected", "appended"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.targets(t, "alpha")
			d := b.ingest(t).Deliveries[0]
			before := b.countRows(t)
			b.w.SetCut(func(at string, batch *pgx.Batch) {
				if at == point {
					batch.Queue(`SELECT pg_terminate_backend(pg_backend_pid())`)
				}
			})
			if _, _, err := b.w.Ingest(b.ctx, newMessage()); err == nil {
				t.Fatal("ingest cut short reported success")
			}
			if _, err := b.w.Claim(b.ctx, d.ID, time.Minute); err == nil {
				t.Fatal("claim cut short reported success")
			}
			if got := b.countRows(t); got != before {
				t.Errorf("rows %v after the cut, %v before", got, before)
			}
			b.w.SetCut(nil)
			b.wake.take()
			if _, err := b.w.Claim(b.ctx, d.ID, time.Minute); err != nil {
				t.Fatalf("claim after the cut: %v", err)
			}
			b.audit(t)
		})
	}
}

// TestCommittedWithoutWakeup covers a crash between the commit and the
// publish: the transition stands, and the delivery is due for the sweep.
func TestCommittedWithoutWakeup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	noNotifier, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := noNotifier.Ingest(b.ctx, newMessage())
	if err != nil {
		t.Fatal(err)
	}
	d := m.Deliveries[0]
	if d.State != lifecycle.StateQueued || !d.NextDue.Equal(b.clock.Now().Add(lifecycle.DispatchBackoff(1))) {
		t.Fatalf("delivery %+v", d)
	}
	b.clock.Advance(lifecycle.DispatchBackoff(1))
	if _, err := b.w.Wake(b.ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	if got := b.wake.take(); len(got) != 1 || got[0].DeliveryID != d.ID {
		t.Errorf("sweep wake-ups %v", got)
	}
	b.audit(t)
}
