package projection

import (
	"context"
	"time"
)

// DefaultShare is the share of the wall time an online rebuild works in
// its fold and its copy when OnlineOptions.Share is zero: the rest it
// leaves to the servers beside it (docs/performance.md, "Online rebuild
// beside a steady ingest").
const DefaultShare = 0.5

// paceStretch is how long a stretch of work runs before its wait: short,
// so the servers beside it wait for a core no longer than that.
const paceStretch = 20 * time.Millisecond

// pacer holds a long piece of work to a share of the wall time: after each
// stretch of paceStretch it waits in proportion to the stretch, so the
// work's connections, its PostgreSQL backend's and its own, use the
// machine that share of the time. A nil pacer, or a share of 1, never
// waits.
type pacer struct {
	share float64
	// from is when the current stretch of work began; ticks counts the
	// calls since time was last read.
	from  time.Time
	ticks int
}

// newPacer returns a pacer for share, nil for a share of 1 or more.
func newPacer(share float64) *pacer {
	if share >= 1 {
		return nil
	}
	return &pacer{share: share, from: time.Now()}
}

// tick is called for each small unit of work (an event folded); it reads
// the time once every 256 calls and waits when a stretch has run.
func (p *pacer) tick(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if p.ticks++; p.ticks < 256 {
		return nil
	}
	p.ticks = 0
	return p.pace(ctx)
}

// pace waits when the current stretch of work has run paceStretch.
func (p *pacer) pace(ctx context.Context) error {
	if p == nil {
		return nil
	}
	worked := time.Since(p.from)
	if worked < paceStretch {
		return nil
	}
	t := time.NewTimer(rest(worked, p.share))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	p.from = time.Now()
	return nil
}

// rest is the wait after worked that keeps the work to share of the time:
// worked/(worked+rest) = share.
func rest(worked time.Duration, share float64) time.Duration {
	return time.Duration(float64(worked) * (1 - share) / share)
}
