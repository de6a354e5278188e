package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/targets"
)

// RuntimeConfig configures a Runtime.
type RuntimeConfig struct {
	// Base's clock is the one the retry and receipt policies and the
	// leases are read by: give the Runtime the Writer's Base.
	service.Base
	// Writer and NATS are required.
	Writer *commands.Writer
	NATS   *nats.Conn
	// DrainGrace is each worker's; default 5 s.
	DrainGrace time.Duration
	// Resync is how often the targets are read again, as a backstop for a
	// change this process was not told of. Default 30 s.
	Resync  time.Duration
	Metrics *Metrics
}

// ConfigSubject carries the news that the configuration changed, between
// the processes that share a database.
const ConfigSubject = "waybill.config"

// Runtime runs one Worker for every enabled target, and follows the
// configuration: a target added, changed, enabled or disabled gets its
// worker started, restarted or stopped at the next Sync, which follows news
// on ConfigSubject at once and runs every Resync in any case.
type Runtime struct {
	cfg RuntimeConfig
	log *slog.Logger
	// reconciler runs Sync at the start, every Resync and when poked.
	reconciler *service.Reconciler
	sub        *nats.Subscription

	mu      sync.Mutex
	running map[string]*targetWorker
	stopped bool
	// taking is running as Reserve reads it, without waiting for mu,
	// which a Sync holds while it stops workers.
	taking atomic.Pointer[map[string]*targetWorker]
}

type targetWorker struct {
	spec   lifecycle.Target
	store  *DeliveryStore
	worker *Worker[targets.Attempt]
}

// NewRuntime returns a Runtime; Start sets it going.
func NewRuntime(cfg RuntimeConfig) (*Runtime, error) {
	if cfg.Writer == nil || cfg.NATS == nil {
		return nil, errors.New("workers: RuntimeConfig.Writer and NATS are required")
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	cfg.Metrics = cfg.Metrics.orNop()
	r := &Runtime{cfg: cfg, log: cfg.Logger, running: map[string]*targetWorker{}}
	r.reconciler = service.NewReconciler("workers", cfg.Resync, cfg.Logger, r.Sync)
	return r, nil
}

// Start starts the workers of the enabled targets; when it returns, each has
// subscribed to its wake-ups. It then keeps them in step with the
// configuration every Resync.
func (r *Runtime) Start(ctx context.Context) error {
	sub, err := r.cfg.NATS.Subscribe(ConfigSubject, func(*nats.Msg) {
		// The Writer's cached routes go at once; the workers follow in
		// the loop, so this callback never waits on the database.
		r.cfg.Writer.Invalidate()
		r.resync()
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", ConfigSubject, err)
	}
	r.sub = sub
	if err := r.reconciler.Start(ctx); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	r.cfg.Writer.SetTaker(r)
	// An outcome that disables a target (a 410, or its health's
	// disable_after) stops its workers in every process at once.
	r.cfg.Writer.OnDisable(r.ConfigChanged)
	return nil
}

// ConfigChanged tells every process on the NATS, this one included, that
// a route, target or settings change has committed. A lost message costs
// at most Resync: the configuration is read again then anyway.
func (r *Runtime) ConfigChanged() {
	r.cfg.Writer.Invalidate()
	r.resync()
	if err := r.cfg.NATS.Publish(ConfigSubject, nil); err != nil {
		r.log.Debug("configuration change not published", "err", err)
	}
}

func (r *Runtime) resync() { r.reconciler.Poke() }

// Sync reads the targets and starts, restarts or stops workers to match;
// call it after a configuration change.
func (r *Runtime) Sync(ctx context.Context) error {
	all, err := r.cfg.Writer.Targets(ctx)
	if err != nil {
		return fmt.Errorf("sync workers: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil
	}
	want := map[string]lifecycle.Target{}
	names := make([]string, len(all))
	for i, t := range all {
		names[i] = t.Name
		if t.Enabled {
			want[t.Name] = t
		}
	}
	r.cfg.Metrics.Track(names)
	var errs []error
	// A restarted worker takes over the retries its predecessor recorded,
	// so a change to a target does not leave them to the sweep.
	retries := map[string][]time.Time{}
	for name, tw := range r.running {
		if spec, ok := want[name]; !ok || !reflect.DeepEqual(spec, tw.spec) {
			tw.worker.Stop(ctx)
			delete(r.running, name)
			retries[name] = tw.worker.retries.left()
		}
	}
	for name, spec := range want {
		if _, ok := r.running[name]; ok {
			continue
		}
		tw, err := r.startWorker(ctx, spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tw.worker.retries.add(retries[name]...)
		r.running[name] = tw
	}
	r.taking.Store(new(maps.Clone(r.running)))
	return errors.Join(errs...)
}

var _ commands.Taker = (*Runtime)(nil)

// Reserve holds a free slot of the target's worker for a claim the Writer
// makes as it dispatches (commands.Taker): the Runtime is its Writer's
// Taker from Start to Stop. A target with a rate gets none: its claims
// wait for its bucket's tokens (DeliveryStore), never taken beside an
// ingest. One with max_concurrent does, which targets_admit holds to it
// across the cluster.
func (r *Runtime) Reserve(target string) (commands.Slot, bool) {
	running := r.taking.Load()
	if running == nil {
		return nil, false
	}
	tw := (*running)[target]
	if tw == nil || tw.spec.Rate != nil || !tw.worker.reserve() {
		return nil, false
	}
	return slot{tw}, true
}

// slot is a slot of a target's worker that Reserve held.
type slot struct{ tw *targetWorker }

// Lease is the target's lease, as its worker's own claims take.
func (s slot) Lease() time.Duration { return s.tw.spec.Lease() }

// Run attempts the claim in the slot, as a job of the worker's store.
func (s slot) Run(c commands.Claim) { s.tw.worker.runReserved(s.tw.store.jobs([]commands.Claim{c})[0]) }

// Free gives the slot back to the worker.
func (s slot) Free() { s.tw.worker.free() }

func (r *Runtime) startWorker(ctx context.Context, t lifecycle.Target) (*targetWorker, error) {
	// The keys are read once per worker: a change of them changes the
	// target's definition (its signing.keys), which restarts the worker.
	var keys []targets.Key
	if targets.Signs(t) {
		var err error
		if keys, err = r.cfg.Writer.TargetKeys(ctx, t.Name); err != nil {
			return nil, fmt.Errorf("target %s: %w", t.Name, err)
		}
	}
	kind, err := targets.New(t, keys, r.cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", t.Name, err)
	}
	store := NewDeliveryStore(r.cfg.Writer, t)
	w, err := NewWorker(Config[targets.Attempt]{
		Name:           t.Name,
		Store:          store,
		Deliverer:      traced(r.cfg.Tracer, &policyDeliverer{target: t, kind: kind, now: r.cfg.Now}, attemptSpan),
		NATS:           r.cfg.NATS,
		Subject:        DeliverySubject(t.Name),
		MaxConcurrent:  targets.Slots(t),
		AttemptTimeout: t.AttemptTimeout.D(),
		DrainGrace:     r.cfg.DrainGrace,
		Metrics:        r.cfg.Metrics,
		Base:           r.cfg.Base,
	})
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("target %s: %w", t.Name, err)
	}
	r.log.Info("worker started", "target", t.Name, "kind", t.Kind, "slots", targets.Slots(t))
	return &targetWorker{spec: t, store: store, worker: w}, nil
}

// Stop stops every worker at once, each draining as Worker.Stop does, and
// waits for them. Safe to call twice.
func (r *Runtime) Stop(ctx context.Context) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	running := r.running
	r.running = nil
	r.taking.Store(nil)
	r.mu.Unlock()
	r.cfg.Writer.DropTaker(r)
	r.cfg.Writer.OnDisable(nil)
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
	r.reconciler.Stop(ctx)
	var wg sync.WaitGroup
	for _, tw := range running {
		wg.Go(func() { tw.worker.Stop(ctx) })
	}
	wg.Wait()
}
