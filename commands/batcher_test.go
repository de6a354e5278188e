package commands

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBatcherRunsEveryOpOnceAndReturnsItsCaller sends ops from many
// goroutines through a batcher whose batches take a while, as a busy
// database's do: every op is in exactly one batch, no more than maxLeaders
// batches run at once, every caller returns once its op has run, and no
// leader is left behind.
func TestBatcherRunsEveryOpOnceAndReturnsItsCaller(t *testing.T) {
	t.Parallel()
	var (
		g            batcher
		running, top atomic.Int64
		runs         sync.Map // *op → times run
		batches      atomic.Int64
	)
	run := func(ops []*op) {
		n := running.Add(1)
		for cur := top.Load(); n > cur && !top.CompareAndSwap(cur, n); cur = top.Load() {
		}
		defer running.Add(-1)
		batches.Add(1)
		time.Sleep(200 * time.Microsecond)
		for _, o := range ops {
			n, _ := runs.LoadOrStore(o, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			o.err = context.Canceled // a result the caller can see
		}
	}
	const callers, each = 40, 50
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				o := &op{ctx: context.Background(), done: make(chan bool, 2)}
				g.do(o, run)
				if o.err == nil {
					t.Error("a caller returned before its op ran")
					return
				}
				if n, ok := runs.Load(o); !ok || n.(*atomic.Int64).Load() != 1 {
					t.Error("an op did not run exactly once")
					return
				}
			}
		})
	}
	wg.Wait()
	if top.Load() > maxLeaders {
		t.Errorf("%d batches ran at once, at most %d may", top.Load(), maxLeaders)
	}
	if g.leaders != 0 || len(g.pending) != 0 {
		t.Errorf("left %d leaders and %d pending", g.leaders, len(g.pending))
	}
	if b := batches.Load(); b >= callers*each {
		t.Errorf("%d batches for %d ops: none shared", b, callers*each)
	}
}
