package projection_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestOnlineRebuildBesideKeyedWriters runs an online rebuild while four
// writers ingest into two lanes of a fifo target and claim and deliver
// their heads: two transactions on one lane may hold their ids the other
// way round from their events' positions, which the catch-up reads in id
// order. No write fails (a claim that meets the switch in a deadlock
// tries again), the rebuild's audit is clean, and the tables equal what
// an offline rebuild makes of the journal.
func TestOnlineRebuildBesideKeyedWriters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t)
	b.lifecycles(t, 30, rand.New(rand.NewPCG(9, 10)))
	// The writers finish their message once stopped rather than cancel
	// their commands, which could commit after the test reads the tables.
	var (
		stopped atomic.Bool
		done    atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stopped.Load(); i++ {
				_, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "lab", From: "a", To: "b",
					Payload: fmt.Appendf(nil, "%d/%d", w, i), OrderingKey: fmt.Sprint("k-", i%2)})
				if err == nil {
					var claims []commands.Claim
					claims, err = b.w.ClaimDue(b.ctx, "hl7", 2, time.Minute)
					for _, c := range claims {
						if err == nil {
							_, err = b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200 OK"))
						}
					}
				}
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		})
	}
	failed := func() error { mu.Lock(); defer mu.Unlock(); return first }
	r, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{Share: 1,
		Pause: func(p projection.OnlinePhase) {
			if p == projection.PhaseSwitch {
				return
			}
			from := done.Load()
			testpoll.Until(t, "writers to go on during "+string(p), func() bool { return done.Load() >= from+40 || failed() != nil })
		}})
	stopped.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := failed(); err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) > 0 {
		t.Fatalf("audit of the online rebuild: %v", r.Violations)
	}
	dbtest.Audit(t, b.db)
	online := b.tables(t)
	if _, err := projection.Rebuild(b.ctx, b.db); err != nil {
		t.Fatal(err)
	}
	sameRows(t, "online", online, "offline", b.tables(t))
}
