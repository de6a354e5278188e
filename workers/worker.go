package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// Job is one claimed piece of work: the claim's token, when the claim
// runs out, and what to attempt.
type Job[T any] struct {
	ID    uuid.UUID
	Token uuid.UUID
	// LeaseEnd is when the claim runs out. Until then the worker tries
	// again to record an outcome or a release that failed for a reason
	// that can pass; with a zero LeaseEnd it tries once.
	LeaseEnd time.Time
	Work     T
}

// Next is what a worker's outcome may claim, in the same write, for the
// worker to attempt next in the same slot.
type Next int

// The Nexts a worker asks for.
const (
	// NextNone claims nothing: the worker is stopping, or a wake-up waits
	// for the slot.
	NextNone Next = iota
	// NextFreed claims the job the outcome lets go, if any: the delivery
	// next in its lane.
	NextFreed
	// NextDue claims that or else the oldest due job, as ClaimDue would:
	// the worker has a backlog, so a slot is not left idle until a
	// catch-up's claim returns.
	NextDue
)

// Store keeps a worker's jobs. Every method is conditional on the claim, so
// several workers, in one process or many, may share a store.
type Store[T any] interface {
	// Claim takes the job a wake-up names, by compare-and-swap on its state;
	// commands.ErrNotClaimable when it is not to be taken now.
	Claim(ctx context.Context, id uuid.UUID) (Job[T], error)
	// ClaimDue takes up to n jobs that are due, skipping those other
	// workers are claiming.
	ClaimDue(ctx context.Context, n int) ([]Job[T], error)
	// HeldUntil is when jobs the store holds back now (a target's health
	// holding its deliveries) may be claimed again; zero when none is
	// held. A catch-up that comes back short catches up again then.
	HeldUntil() time.Time
	// Complete records an attempt's outcome; commands.ErrClaimLost when the
	// claim is no longer the job's. It may be called again for the same
	// job after an error that commands.Transient reports as passing. next
	// is a job the store claimed for this worker in the same write, as
	// claim asks, nil when there is none.
	Complete(ctx context.Context, job Job[T], outcome lifecycle.Outcome, claim Next) (next *Job[T], err error)
	// Release gives a claim back: started says whether the attempt had
	// begun its I/O. It may be called again as Complete may.
	Release(ctx context.Context, job Job[T], started bool, reason string) error
}

// Deliverer makes one attempt at a job and reports its outcome, complete
// and valid: the worker records it as it is. ctx ends at the attempt
// timeout or when the worker stops.
type Deliverer[T any] interface {
	Deliver(ctx context.Context, work T) lifecycle.Outcome
}

// Config configures a Worker.
type Config[T any] struct {
	// Name labels logs and metrics: the target's name.
	Name      string
	Store     Store[T]
	Deliverer Deliverer[T]
	// NATS and Subject are where wake-ups arrive; a nil NATS leaves the
	// worker to its catch-up, which runs at start and on Poke.
	NATS    *nats.Conn
	Subject string
	// MaxConcurrent bounds the attempts in flight. Default 1.
	MaxConcurrent int
	// AttemptTimeout bounds one attempt. Default 30 s.
	AttemptTimeout time.Duration
	// DrainGrace is how long Stop lets attempts in flight finish before it
	// cancels them. Default 5 s.
	DrainGrace time.Duration
	Metrics    *Metrics
	// Base's clock is the one a job's LeaseEnd is read by: the Store's.
	service.Base
}

// flushTimeout bounds the round trip that confirms a subscription.
const flushTimeout = 10 * time.Second

// recordTimeout bounds one try at recording an outcome or a release, and
// how long Stop lets the recordings still failing go on after the drain
// grace. A try's context is not the worker's, so a stop does not cut it
// short before then.
const recordTimeout = 10 * time.Second

// Worker claims jobs as wake-ups name them, attempts each within a slot of
// MaxConcurrent and records the outcome. An outcome that retries the job
// sets the worker's timer: when the retry comes due, a catch-up claims it.
type Worker[T any] struct {
	cfg     Config[T]
	log     *slog.Logger
	metrics *Metrics

	// wake holds the ids of wake-ups not yet taken; full, a wake-up is
	// dropped and a catch-up is asked for instead.
	wake chan uuid.UUID
	// waiting is set while the loop holds a wake-up and waits for a slot
	// for it.
	waiting atomic.Bool
	// poke asks the loop for a catch-up.
	poke chan struct{}
	// dropped is set when a wake-up is dropped; empty counts the catch-ups
	// in a row that claimed nothing (the loop's own).
	dropped atomic.Bool
	empty   int
	// backlog is set when a catch-up claims all it asked for, so more may
	// be due, and cleared when one comes back short or an outcome asking
	// for a due job finds none: while it is set, outcomes ask for NextDue.
	backlog atomic.Bool
	// slots holds one token per attempt in flight.
	slots chan struct{}
	// idle hands a job's run to a goroutine of the worker's that ran one
	// before and waits for the next (runner).
	idle chan func()
	// reserving orders reserve before the end of claiming (soft), so no
	// slot is reserved once Stop waits for the attempts.
	reserving sync.Mutex

	// soft ends claiming; hard cancels the attempts in flight.
	soft, hard             context.Context
	cancelSoft, cancelHard context.CancelFunc
	sub                    *nats.Subscription
	loopDone               chan struct{}
	attempts               sync.WaitGroup
	startOnce, stopOnce    sync.Once

	// retries pokes the loop when a retry the worker recorded comes due.
	retries *retryTimer

	// quit ends the recordings still being tried, leaving their jobs to
	// their leases.
	quit       context.Context
	cancelQuit context.CancelFunc
}

// NewWorker returns a Worker; Start sets it going.
func NewWorker[T any](cfg Config[T]) (*Worker[T], error) {
	if cfg.Store == nil || cfg.Deliverer == nil {
		return nil, errors.New("workers: Config.Store and Config.Deliverer are required")
	}
	if cfg.NATS != nil && cfg.Subject == "" {
		return nil, errors.New("workers: Config.Subject is required with Config.NATS")
	}
	cfg.MaxConcurrent = max(cfg.MaxConcurrent, 1)
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = lifecycle.DefaultAttemptTimeout
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = 5 * time.Second
	}
	cfg.Base = cfg.Base.WithDefaults()
	w := &Worker[T]{
		cfg:      cfg,
		log:      cfg.Logger.With("target", cfg.Name),
		metrics:  cfg.Metrics.orNop(),
		wake:     make(chan uuid.UUID, 2*cfg.MaxConcurrent),
		poke:     make(chan struct{}, 1),
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		idle:     make(chan func()),
		loopDone: make(chan struct{}),
		empty:    emptyCatchUps,
	}
	w.retries = newRetryTimer(cfg.Now, w.Poke)
	w.soft, w.cancelSoft = context.WithCancel(context.Background())
	w.hard, w.cancelHard = context.WithCancel(context.Background())
	w.quit, w.cancelQuit = context.WithCancel(context.Background())
	return w, nil
}

// Start subscribes to the wake-ups, then starts the loop, whose first act is
// a catch-up: whatever came due while nobody listened is taken at once.
// The subscription is confirmed within ctx.
func (w *Worker[T]) Start(ctx context.Context) error {
	err := errors.New("workers: worker started twice")
	w.startOnce.Do(func() {
		err = nil
		if w.cfg.NATS != nil {
			w.sub, err = w.cfg.NATS.Subscribe(w.cfg.Subject, w.onWakeup)
			if err == nil {
				// The round trip makes the server hold the subscription
				// before Start returns, so no wake-up published after it
				// is missed.
				fctx, cancel := context.WithTimeout(ctx, flushTimeout)
				err = w.cfg.NATS.FlushWithContext(fctx)
				cancel()
			}
			if err != nil {
				err = fmt.Errorf("subscribe to %s: %w", w.cfg.Subject, err)
				close(w.loopDone)
				return
			}
		}
		go w.loop()
	})
	return err
}

// onWakeup runs on the subscription's goroutine and never blocks it: a
// burst larger than the queue collapses into one catch-up.
func (w *Worker[T]) onWakeup(msg *nats.Msg) {
	id, err := parseWakeup(msg.Data)
	if err != nil {
		w.log.Warn("malformed wake-up", "subject", msg.Subject, "err", err)
		return
	}
	select {
	case w.wake <- id:
	default:
		w.metrics.wakeupsDropped.WithLabelValues(w.cfg.Name).Inc()
		w.dropped.Store(true)
		w.Poke()
	}
}

// Poke asks for a catch-up: the worker claims what is due as slots allow.
func (w *Worker[T]) Poke() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

func (w *Worker[T]) loop() {
	defer close(w.loopDone)
	w.catchUp()
	for {
		select {
		case <-w.soft.Done():
			return
		case <-w.poke:
			w.catchUp()
		case id := <-w.wake:
			w.waiting.Store(true)
			ok := w.acquire()
			w.waiting.Store(false)
			if !ok {
				return
			}
			w.attempts.Add(1)
			w.spawn(func() { w.claimAndRun(id) })
		}
	}
}

// acquire waits for a free slot; false when the worker stops first.
func (w *Worker[T]) acquire() bool {
	select {
	case w.slots <- struct{}{}:
		return true
	case <-w.soft.Done():
		return false
	}
}

func (w *Worker[T]) releaseSlot() { <-w.slots }

// waitedFor reports a wake-up that waits for a slot: queued, or held by the
// loop until one is free.
func (w *Worker[T]) waitedFor() bool { return w.waiting.Load() || len(w.wake) > 0 }

// reserve holds a free slot for a job claimed for the worker elsewhere
// (commands.Taker), which run or free then ends. Only when nothing waits
// for a slot: no wake-up queued or dropped, no backlog, so the work
// already due keeps its turn.
func (w *Worker[T]) reserve() bool {
	w.reserving.Lock()
	defer w.reserving.Unlock()
	if w.soft.Err() != nil || w.backlog.Load() || w.dropped.Load() || w.waitedFor() {
		return false
	}
	select {
	case w.slots <- struct{}{}:
		w.attempts.Add(1)
		return true
	default:
		return false
	}
}

// runReserved attempts a job claimed for a slot reserve held.
func (w *Worker[T]) runReserved(job Job[T]) {
	w.metrics.claims.WithLabelValues(w.cfg.Name, claimClaimed).Inc()
	w.spawn(func() { w.run(job) })
}

// free gives back a slot reserve held, unused.
func (w *Worker[T]) free() {
	w.releaseSlot()
	w.attempts.Done()
}

// A catch-up that comes back short is followed by another catchUpAgain
// later, and each that claims nothing doubles the wait, up to emptyCatchUps
// of them in a row (about 1.3 s in all). ClaimDue passes over the jobs whose
// rows other transactions hold at that moment (for a delivery: a batch of
// commands on another delivery of its message holds the message row until
// it commits), and when such a job's wake-up was dropped, nothing else would
// claim it before the sweep. A claim, or a dropped wake-up, starts the count
// again; a worker that has claimed nothing since it started makes no chain.
const (
	catchUpAgain  = 20 * time.Millisecond
	emptyCatchUps = 6
)

// catchUp claims due jobs batch by batch, as many as slots are free, until
// fewer are due than were asked for.
func (w *Worker[T]) catchUp() {
	for {
		if !w.acquire() {
			return
		}
		n := 1
		for n < w.cfg.MaxConcurrent {
			select {
			case w.slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		jobs, err := w.cfg.Store.ClaimDue(ctx, n)
		cancel()
		if err != nil {
			w.log.Error("catch-up", "err", err)
		}
		w.metrics.claims.WithLabelValues(w.cfg.Name, claimClaimed).Add(float64(len(jobs)))
		w.backlog.Store(err == nil && len(jobs) == n)
		for _, job := range jobs {
			w.attempts.Add(1)
			w.spawn(func() { w.run(job) })
		}
		for range n - len(jobs) {
			w.releaseSlot()
		}
		if err != nil || len(jobs) < n {
			w.retryHeld()
			if w.dropped.Swap(false) || len(jobs) > 0 {
				w.empty = 0
			}
			if err == nil && w.empty < emptyCatchUps {
				time.AfterFunc(catchUpAgain<<w.empty, w.Poke)
				if len(jobs) == 0 {
					w.empty++
				}
			}
			return
		}
	}
}

// retryHeld sets the retries' timer at the end of the store's hold, if
// it holds jobs back: a claim it refused comes back then.
func (w *Worker[T]) retryHeld() {
	if at := w.cfg.Store.HeldUntil(); !at.IsZero() {
		w.retries.add(at)
	}
}

// spawn runs f, the run of a job in its slot, on a goroutine that ran one
// before and waits for another (runner), or on a new one that then
// waits. An attempt's calls (the worker's, the traced and signed HTTP
// request's) need more stack than a new goroutine starts with: with a
// goroutine per attempt, each attempt copied its stack as it grew.
func (w *Worker[T]) spawn(f func()) {
	select {
	case w.idle <- f:
	default:
		go w.runner(f)
	}
}

// runner runs f, then each run spawn hands it, until the worker has
// stopped and its recordings have ended (quit). A run holds a slot, so
// there are about as many runners as slots.
func (w *Worker[T]) runner(f func()) {
	for {
		f()
		select {
		case f = <-w.idle:
		case <-w.quit.Done():
			return
		}
	}
}

// claimAndRun claims the job a wake-up named and runs it; the slot is held.
func (w *Worker[T]) claimAndRun(id uuid.UUID) {
	if w.soft.Err() != nil {
		w.releaseSlot()
		w.attempts.Done()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	job, err := w.cfg.Store.Claim(ctx, id)
	cancel()
	if err != nil {
		if errors.Is(err, commands.ErrNotClaimable) || errors.Is(err, commands.ErrNotFound) {
			w.metrics.claims.WithLabelValues(w.cfg.Name, claimConflict).Inc()
			w.retryHeld()
		} else {
			// The wake-up is spent and the job still due: as for a
			// dropped wake-up, a catch-up takes it rather than the sweep.
			w.log.Error("claim", "delivery_id", id, "err", err)
			w.dropped.Store(true)
			w.Poke()
		}
		w.releaseSlot()
		w.attempts.Done()
		return
	}
	w.metrics.claims.WithLabelValues(w.cfg.Name, claimClaimed).Inc()
	w.run(job)
}

// run attempts a claimed job and records what came of it, then the jobs
// its outcomes claimed in turn; the slot is held.
func (w *Worker[T]) run(job Job[T]) {
	defer w.attempts.Done()
	defer w.releaseSlot()
	for next := &job; next != nil; {
		next = w.attempt(*next)
	}
}

// deliver makes an attempt. A panic in it, a bug that what the attempt
// reads (a payload, a transform, a receiver's answer) may set off again,
// is that attempt's outcome: a retry, as for a failed connection, logged
// with its stack, while the process and its other attempts go on.
func (w *Worker[T]) deliver(ctx context.Context, work T) (o lifecycle.Outcome) {
	var err error
	defer func() {
		if err != nil {
			o = lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: lifecycle.Cut(err.Error(), lifecycle.MaxErrorTextLength)}
		}
	}()
	defer service.Recovered(w.log, "attempt", &err)
	return w.cfg.Deliverer.Deliver(ctx, work)
}

// attempt attempts a claimed job and records what came of it. It returns
// the job the outcome claimed for this worker, nil when there is none or
// the worker is stopping (the job is then given back).
func (w *Worker[T]) attempt(job Job[T]) *Job[T] {
	if w.hard.Err() != nil {
		w.giveBack(job, false, "the worker stopped before the attempt began")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.AttemptTimeout)
	stop := context.AfterFunc(w.hard, cancel)
	began := time.Now()
	outcome := w.deliver(ctx, job.Work)
	stop()
	cancel()
	w.metrics.attemptSeconds.WithLabelValues(w.cfg.Name).Observe(time.Since(began).Seconds())
	if w.hard.Err() != nil {
		// The stop cut the attempt short: give it back rather than count it.
		w.giveBack(job, true, "the worker stopped during the attempt")
		return nil
	}
	claim := NextFreed
	switch {
	case w.soft.Err() != nil:
		claim = NextNone
	case w.waitedFor():
		// The job the outcome lets go (its lane's next) is woken, and
		// queues behind the wake-ups that came first: a lane whose next
		// is always ready must not keep the slot from other lanes. The
		// slot is not left idle: the wake-up takes it.
		claim = NextNone
	case w.backlog.Load():
		claim = NextDue
	}
	var next *Job[T]
	complete := func(ctx context.Context) (err error) {
		next, err = w.cfg.Store.Complete(ctx, job, outcome, claim)
		return err
	}
	if w.record(job, "outcome", complete, "outcome", outcome.Kind) != nil {
		return nil
	}
	if claim == NextDue && next == nil {
		w.backlog.Store(false)
	}
	if next == nil {
		// Held back (a rate's bucket empty): come back when it lets go.
		w.retryHeld()
	}
	if outcome.Kind == lifecycle.OutcomeRetry {
		w.retries.add(outcome.RetryAt)
	}
	w.metrics.attempts.WithLabelValues(w.cfg.Name, string(outcome.Kind), statusClass(outcome.StatusCode)).Inc()
	if next == nil {
		return nil
	}
	w.metrics.claims.WithLabelValues(w.cfg.Name, claimClaimed).Inc()
	if w.soft.Err() != nil {
		// A stopping worker claims nothing new: the drain is for the
		// attempts it had begun. The stop came while the outcome was
		// written.
		w.giveBack(*next, false, "the worker stopped before the attempt began")
		return nil
	}
	return next
}

func (w *Worker[T]) giveBack(job Job[T], started bool, reason string) {
	release := func(ctx context.Context) error { return w.cfg.Store.Release(ctx, job, started, reason) }
	if w.record(job, "release", release) != nil {
		return
	}
	w.metrics.attempts.WithLabelValues(w.cfg.Name, released, noStatus).Inc()
}

// Stop stops claiming (unsubscribes, ends the loop, its catch-up and the
// retries' timer), lets the attempts in flight finish, and their outcomes
// be recorded, for DrainGrace or until ctx is done, then cancels the rest,
// which are released. Recordings that still fail for a reason that can pass go on
// for recordTimeout more at most, or until ctx is done; their jobs are then
// left to their leases. Safe to call twice.
func (w *Worker[T]) Stop(ctx context.Context) {
	w.stopOnce.Do(func() {
		if w.sub != nil {
			if err := w.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				w.log.Warn("unsubscribe", "err", err)
			}
		}
		w.reserving.Lock()
		w.cancelSoft()
		w.reserving.Unlock()
		w.retries.stop()
		w.startOnce.Do(func() { close(w.loopDone) })
		<-w.loopDone
		drained := make(chan struct{})
		go func() {
			w.attempts.Wait()
			close(drained)
		}()
		grace := time.NewTimer(w.cfg.DrainGrace)
		defer grace.Stop()
		select {
		case <-drained:
		case <-grace.C:
		case <-ctx.Done():
		}
		w.cancelHard()
		give := time.AfterFunc(recordTimeout, w.cancelQuit)
		defer give.Stop()
		stop := context.AfterFunc(ctx, w.cancelQuit)
		defer stop()
		<-drained
		w.cancelQuit()
	})
}
