package intake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sources"
	"github.com/waybill/waybill/workers"
)

// Config configures a Runtime.
type Config struct {
	// Base's clock decides when a file has settled, when a lease ends and
	// when a hole is old enough to pass: give the Runtime the Writer's Base.
	service.Base
	// Writer and DB are required.
	Writer *commands.Writer
	DB     *pgxpool.Pool
	// NATS, when set, brings the news of a configuration change from any
	// process (workers.ConfigSubject), so a source added, changed or
	// removed is followed at once rather than at the next Resync.
	NATS    *nats.Conn
	Metrics *Metrics
	// MaxPayload bounds a message's body: a larger file goes to the error
	// folder, a larger row stops its source. Default 10 MiB.
	MaxPayload int64
	// Lease is how long a process holds a source once it took or renewed
	// it; a process that dies hands the source over when it ends. Default
	// 30 s.
	Lease time.Duration
	// Resync is how often the sources are read again. Default 30 s.
	Resync time.Duration
	// Holder names this process in the leases. Default host:pid:random.
	Holder string
}

// Runtime polls the enabled sources. Every process runs one; a lease in
// the database (source_state) makes one process at a time poll a given
// source.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	// reconciler runs Sync at the start, every Resync and when poked.
	reconciler *service.Reconciler
	sub        *nats.Subscription

	mu      sync.Mutex
	running map[string]*runner
	stopped bool
}

// New returns a Runtime; Start sets it going.
func New(cfg Config) (*Runtime, error) {
	if cfg.Writer == nil || cfg.DB == nil {
		return nil, errors.New("intake: Config.Writer and Config.DB are required")
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = lifecycle.DefaultMaxPayload
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		cfg.Holder = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger.With("component", "intake"), metrics: cfg.Metrics.orNop(),
		running: map[string]*runner{}}
	r.reconciler = service.NewReconciler("sources", cfg.Resync, r.log, r.Sync)
	return r, nil
}

// Start starts a runner for every enabled source, then keeps them in step
// with the configuration. ctx bounds the start only.
func (r *Runtime) Start(ctx context.Context) error {
	if r.cfg.NATS != nil {
		sub, err := r.cfg.NATS.Subscribe(workers.ConfigSubject, func(*nats.Msg) { r.resync() })
		if err != nil {
			return fmt.Errorf("intake: subscribe to %s: %w", workers.ConfigSubject, err)
		}
		r.sub = sub
	}
	if err := r.reconciler.Start(ctx); err != nil {
		if r.sub != nil {
			_ = r.sub.Unsubscribe()
		}
		return err
	}
	return nil
}

func (r *Runtime) resync() { r.reconciler.Poke() }

// Sync reads the sources and starts, restarts or stops runners to match.
// Only the sources Waybill polls have runners and metrics here: a webhook
// source is posted to (package httpapi).
func (r *Runtime) Sync(ctx context.Context) error {
	all, err := r.cfg.Writer.Sources(ctx)
	if err != nil {
		return fmt.Errorf("intake: sync sources: %w", err)
	}
	all = slices.DeleteFunc(all, func(s lifecycle.Source) bool { return !sources.Polled(s.Kind) })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil
	}
	r.metrics.Track(all)
	want := map[string]lifecycle.Source{}
	for _, s := range all {
		if s.Enabled {
			want[s.Name] = s
		}
	}
	for name, run := range r.running {
		if spec, ok := want[name]; !ok || !reflect.DeepEqual(spec, run.spec) {
			run.stop(ctx)
			delete(r.running, name)
		}
	}
	var errs []error
	for name, spec := range want {
		if _, ok := r.running[name]; ok {
			continue
		}
		run, err := r.start(spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.running[name] = run
	}
	return errors.Join(errs...)
}

// Stop stops every runner, each giving its lease back, and waits for them
// within ctx. Safe to call twice.
func (r *Runtime) Stop(ctx context.Context) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	running := r.running
	r.running = nil
	r.mu.Unlock()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
	r.reconciler.Stop(ctx)
	var wg sync.WaitGroup
	for _, run := range running {
		wg.Go(func() { run.stop(ctx) })
	}
	wg.Wait()
}

// poller takes what one source has to take.
type poller interface {
	// resume is called whenever this process comes to hold the source,
	// with the watermark stored for it: what the poller kept in memory
	// may be stale, another process having polled meanwhile.
	resume(watermark int64)
	// poll takes what there is, a bounded batch of it, and reports.
	poll(ctx context.Context) (report, error)
	// close lets go of what the poller holds.
	close()
}

// report is what one poll did and found.
type report struct {
	// taken counts the messages stored by the poll.
	taken int
	// failed counts the items that failed (a file moved to the error
	// folder, markers not written, a row passed for its key held by
	// another message); problem is the last one's reason.
	failed  int
	problem string
	backlog int64
	lag     time.Duration
	// owed is the markers an inbox still owes; -1 for other kinds.
	owed int64
	// more says the poll stopped at its batch's bound: the next follows
	// at once.
	more bool
}

// start makes the poller of a source and runs it.
func (r *Runtime) start(s lifecycle.Source) (*runner, error) {
	p, interval, err := r.newPoller(s)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", s.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &runner{rt: r, spec: s, p: p, interval: interval, cancel: cancel, done: make(chan struct{}),
		log: r.log.With("source", s.Name)}
	go run.run(ctx)
	return run, nil
}

func (r *Runtime) newPoller(s lifecycle.Source) (poller, time.Duration, error) {
	switch s.Kind {
	case sources.KindDirectory:
		cfg, err := sources.Directory(s)
		if err != nil {
			return nil, 0, err
		}
		return newDirectory(s.Name, cfg, r.cfg.Writer, r.cfg.Base, r.cfg.MaxPayload), cfg.Interval.D(), nil
	case sources.KindInboxTable:
		cfg, err := sources.Inbox(s)
		if err != nil {
			return nil, 0, err
		}
		return newInbox(s.Name, r.cfg.Holder, cfg, r.cfg.Writer, r.cfg.DB, r.cfg.Base, r.cfg.MaxPayload), cfg.Interval.D(), nil
	}
	return nil, 0, fmt.Errorf("no poller for kind %q", s.Kind)
}

// runner polls one source while this process holds its lease.
type runner struct {
	rt       *Runtime
	spec     lifecycle.Source
	p        poller
	interval time.Duration
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{}

	// held says this process holds the lease; stale, that a poll panicked
	// and the poller resumes before the next; lastPoll and rate (items
	// per second, smoothed) estimate the time to catch up; lastProblem
	// keeps a failure that repeats from filling the log.
	held        bool
	stale       bool
	lastPoll    time.Time
	rate        float64
	lastProblem string
}

// stopTimeout bounds the release of a lease at a stop.
const stopTimeout = 5 * time.Second

func (run *runner) stop(ctx context.Context) {
	run.cancel()
	select {
	case <-run.done:
	case <-ctx.Done():
	}
}

func (run *runner) run(ctx context.Context) {
	defer close(run.done)
	defer run.p.close()
	defer run.release()
	for {
		if run.renew(ctx) {
			rep, err := run.poll(ctx)
			if ctx.Err() != nil {
				return
			}
			run.report(ctx, rep, err)
			if rep.more && err == nil {
				continue
			}
		}
		t := time.NewTimer(run.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// poll runs one poll. A panic in it, a bug that the source's data may set
// off again at each poll, fails that poll alone: it is logged with its
// stack and reported as the poll's problem, and the poller, whose memory
// it may have left half-changed, resumes from the stored watermark.
func (run *runner) poll(ctx context.Context) (rep report, err error) {
	defer func() {
		if errors.Is(err, service.ErrPanicked) {
			rep, run.stale = report{owed: -1}, true
		}
	}()
	defer service.Recovered(run.log, "poll", &err)
	return run.p.poll(ctx)
}

// renew takes or renews the lease and reports whether this process holds
// it. A process that comes to hold it resumes the poller.
func (run *runner) renew(ctx context.Context) bool {
	now := run.rt.cfg.Now()
	watermark, held, err := sources.TakeLease(ctx, run.rt.cfg.DB, run.spec.Name, run.rt.cfg.Holder, now.Add(run.rt.cfg.Lease), now)
	if err != nil {
		if ctx.Err() == nil {
			run.rt.metrics.errors.WithLabelValues(run.spec.Name).Inc()
			run.problem("lease not renewed", err.Error())
		}
		// The lease may run on; polling without knowing would risk
		// working beside its next holder.
		held = false
	}
	switch {
	case held && !run.held:
		run.log.Info("source taken: this process polls it", "holder", run.rt.cfg.Holder)
		run.p.resume(watermark)
		run.lastPoll, run.rate, run.stale = time.Time{}, 0, false
	case held && run.stale:
		run.p.resume(watermark)
		run.stale = false
	case !held && run.held:
		run.log.Info("source no longer held by this process")
	}
	if !held {
		run.rt.metrics.idle(run.spec.Name, run.spec.Kind)
	}
	run.held = held
	return held
}

// release gives the lease back, so another process may take the source
// at once. It gives it back even when this process does not know it holds
// it: a renewal cut short by the stop may have taken it, its answer lost.
func (run *runner) release() {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := sources.ReleaseLease(ctx, run.rt.cfg.DB, run.spec.Name, run.rt.cfg.Holder); err != nil {
		run.log.Warn("lease not given back; it runs out on its own", "err", err)
	}
	run.rt.metrics.idle(run.spec.Name, run.spec.Kind)
}

// report records what a poll did: in the source's state, which the API
// shows, and in the metrics.
func (run *runner) report(ctx context.Context, rep report, err error) {
	name := run.spec.Name
	m := run.rt.metrics
	now := run.rt.cfg.Now()
	problem := rep.problem
	failures := rep.failed
	if err != nil {
		problem = err.Error()
		failures++
	}
	var last *string
	if problem != "" {
		last = &problem
		run.problem("poll", problem)
	} else {
		run.lastProblem = ""
	}
	if err := sources.RecordPoll(ctx, run.rt.cfg.DB, name, run.rt.cfg.Holder, now, rep.backlog, last); err != nil {
		failures++
		run.problem("status not recorded", err.Error())
	}
	m.taken.WithLabelValues(name).Add(float64(rep.taken))
	m.errors.WithLabelValues(name).Add(float64(failures))
	m.backlog.WithLabelValues(name).Set(float64(rep.backlog))
	m.lag.WithLabelValues(name).Set(rep.lag.Seconds())
	if rep.owed >= 0 {
		m.markersOwed.WithLabelValues(name).Set(float64(rep.owed))
	}
	m.catchUp.WithLabelValues(name).Set(run.catchUp(now, rep))
}

// rateWindow is how far back the rate of taking mostly looks.
const rateWindow = time.Minute

// catchUp smooths the rate of taking over about rateWindow and divides the
// backlog by it.
func (run *runner) catchUp(now time.Time, rep report) float64 {
	if !run.lastPoll.IsZero() {
		if dt := now.Sub(run.lastPoll); dt > 0 {
			sample := float64(rep.taken) / dt.Seconds()
			w := 1 - math.Exp(-dt.Seconds()/rateWindow.Seconds())
			run.rate += w * (sample - run.rate)
		}
	}
	run.lastPoll = now
	switch {
	case rep.backlog <= 0:
		return 0
	case run.rate <= 0:
		return math.Inf(1)
	}
	return float64(rep.backlog) / run.rate
}

// problem logs a failure at warning when it is new and at debug while it
// repeats.
func (run *runner) problem(what, text string) {
	if text == run.lastProblem {
		run.log.Debug(what, "err", text)
		return
	}
	run.lastProblem = text
	run.log.Warn(what, "err", text)
}
