package service

import (
	"context"
	"log/slog"
	"time"
)

// Reconciler keeps what a process runs in step with the configuration: it
// runs its sync once as it starts, then again every period and at once
// after Poke, until it is stopped. A sync that fails is tried again after
// a second, then after twice as long each time up to the period: a
// change whose sync met the database away is not left for a whole period.
// The workers of the targets and the runners of the sources are kept so.
type Reconciler struct {
	name  string
	every time.Duration
	log   *slog.Logger
	sync  func(ctx context.Context) error
	poke  chan struct{}
	loop  *Loop
}

// retryFirst is the wait before a failed sync is tried again the first
// time.
const retryFirst = time.Second

// NewReconciler returns a Reconciler named name (for its errors in log)
// that runs sync every period and after each Poke.
func NewReconciler(name string, every time.Duration, log *slog.Logger, sync func(ctx context.Context) error) *Reconciler {
	return &Reconciler{name: name, every: every, log: log, sync: sync, poke: make(chan struct{}, 1), loop: NewLoop()}
}

// Start runs the sync once with ctx and, when it succeeds, sets the loop
// going; a failed first sync is Start's error and starts nothing.
func (r *Reconciler) Start(ctx context.Context) error {
	if err := r.loop.Begin(r.name); err != nil {
		return err
	}
	if err := r.syncOnce(ctx); err != nil {
		r.loop.Abandon()
		return err
	}
	r.loop.Go(func(ctx context.Context) {
		var retry time.Duration
		t := time.NewTimer(r.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-r.poke:
			}
			if err := r.syncOnce(ctx); err != nil && ctx.Err() == nil {
				retry = min(max(2*retry, retryFirst), r.every)
				r.log.Error("sync with the configuration", "loop", r.name, "err", err, "retry_in", retry)
				t.Reset(retry)
				continue
			}
			retry = 0
			t.Reset(r.every)
		}
	})
	return nil
}

// syncOnce runs the sync; a panic in it fails that sync alone.
func (r *Reconciler) syncOnce(ctx context.Context) (err error) {
	defer Recovered(r.log, r.name+" sync", &err)
	return r.sync(ctx)
}

// Poke asks for a sync at once: the configuration changed. It never
// blocks; pokes while one waits are one.
func (r *Reconciler) Poke() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// Stop ends the loop, cancelling a sync in progress, and waits for it
// within ctx. Safe to call twice.
func (r *Reconciler) Stop(ctx context.Context) { r.loop.Stop(ctx) }
