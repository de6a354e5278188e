package bulk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
)

// Config configures a Runner.
type Config struct {
	// Base's clock stamps the operations' events and paces the batches:
	// give the Runner the Writer's Base.
	service.Base
	// Writer and DB are required.
	Writer *commands.Writer
	DB     *pgxpool.Pool
	// Registerer takes the runner's metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Poll is how often an idle runner looks for running operations, and a
	// runner without the lock tries to take it. Default 1 s.
	Poll time.Duration
}

// The bounds of the runner's waits after a batch that failed for a
// reason that can pass (the database away).
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Runner runs the bulk operations in the background.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	wake    chan struct{}
	// lease is held by the one process that runs the operations, for as
	// long as its runner runs; a process that dies drops it with its
	// connection, so another takes over at its next look. It only keeps the
	// work in one place, paced once: that no message is acted on twice
	// never depends on it (see commands.Writer.Operate). Only the loop
	// touches it.
	lease *schema.Lease

	loop *service.Loop
}

// New returns a Runner; Start sets it going.
func New(cfg Config) (*Runner, error) {
	if cfg.Writer == nil || cfg.DB == nil {
		return nil, errors.New("bulk: Config.Writer and Config.DB are required")
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	log := cfg.Logger.With("component", "bulk")
	return &Runner{cfg: cfg, log: log, metrics: newMetrics(cfg.Registerer), wake: make(chan struct{}, 1),
		lease: schema.NewLease(cfg.DB, schema.KeyBulk, "bulk", log, cfg.Registerer), loop: service.NewLoop()}, nil
}

// Start sets the loop going: it looks for running operations at once, and
// then as Wake or the poll says.
func (r *Runner) Start(context.Context) error {
	if err := r.loop.Begin("bulk"); err != nil {
		return err
	}
	r.loop.Go(r.run)
	return nil
}

// Stop ends the loop, cancelling a batch in flight (which commits whole or
// not at all), gives the lock up and waits within ctx. Safe to call twice.
func (r *Runner) Stop(ctx context.Context) { r.loop.Stop(ctx) }

// Wake tells the runner an operation was created, so it looks at once
// rather than at its next poll. It never blocks.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Runner) run(ctx context.Context) {
	defer r.lease.Release()
	var backoff time.Duration
	for {
		wait := r.cfg.Poll
		if n, err := projection.CountRunning(ctx, r.cfg.DB); err == nil {
			r.metrics.running.Set(float64(n))
		}
		mine, err := r.lease.Take(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("take the bulk operations' lease", "err", err)
		}
		if err == nil && mine {
			start := r.cfg.Now()
			res, err := r.Step(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				backoff = min(max(2*backoff, minBackoff), maxBackoff)
				wait = backoff
				r.log.Warn("bulk operation batch failed; trying again", "operation_id", res.Operation, "in", wait, "err", err)
			case res.Taken > 0:
				backoff = 0
				wait = res.Pace - r.cfg.Now().Sub(start)
			case res.Operation != uuid.Nil:
				// An operation ended, or moved under this runner: look again.
				backoff, wait = 0, 0
			}
		}
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// Result is what one Step did.
type Result struct {
	// Operation is the operation the step looked at; uuid.Nil when none
	// runs.
	Operation uuid.UUID
	// Taken counts the messages of the batch, Done and Refused how they
	// came out.
	Taken, Done, Refused int
	// Ended says the step ended the operation: done, or failed.
	Ended bool
	// Pace is the time the batch is given at the rate in force: the loop
	// waits out what the batch did not use before the next.
	Pace time.Duration
}

// BatchSize is how many messages a batch takes at rate messages per
// second: a quarter of a second's worth, from 1 to 100, so batches stay
// short transactions and the pace even.
func BatchSize(rate int) int { return min(max(rate/4, 1), 100) }

// Step takes one batch of the running operation that has waited longest,
// or ends it once it has taken every message it matched. It takes no lock
// (the loop does), so the tests drive it directly. An error is one that
// can pass (the database away): the step changed nothing and may be run
// again. A failure that cannot pass ends the operation failed, with the
// error as its reason.
func (r *Runner) Step(ctx context.Context) (_ Result, err error) {
	defer service.Recovered(r.log, "bulk step", &err)
	o, err := projection.NextRunning(ctx, r.cfg.DB)
	if err != nil || o == nil {
		return Result{}, err
	}
	res := Result{Operation: o.ID}
	if o.Next() >= o.Matched {
		after, err := r.cfg.Writer.FinishOperation(ctx, o, "")
		if errors.Is(err, commands.ErrOperationMoved) {
			return res, nil
		}
		if err != nil {
			return res, r.failOn(ctx, o, err)
		}
		res.Ended = true
		r.log.Info("bulk operation done", "operation_id", o.ID, "action", o.Action, "matched", o.Matched,
			"done", after.Done, "refused", after.Refused)
		return res, nil
	}
	settings, err := r.cfg.Writer.CachedSettings(ctx)
	if err != nil {
		return res, err
	}
	rate := settings.WithDefaults().Operations.Rate
	ids, err := projection.LoadMatched(ctx, r.cfg.DB, o, o.Next(), BatchSize(rate))
	if err == nil && len(ids) == 0 {
		err = fmt.Errorf("its stream lists %d of the %d messages it matched", o.Listed, o.Matched)
	}
	if err != nil {
		return res, r.failOn(ctx, o, err)
	}
	after, err := r.cfg.Writer.Operate(ctx, o, ids)
	if errors.Is(err, commands.ErrOperationMoved) {
		return res, nil
	}
	if err != nil {
		return res, r.failOn(ctx, o, err)
	}
	res.Taken, res.Done, res.Refused = after.Next()-o.Next(), after.Done-o.Done, after.Refused-o.Refused
	res.Pace = time.Duration(float64(res.Taken) / float64(rate) * float64(time.Second))
	r.metrics.messages.WithLabelValues(resultDone).Add(float64(res.Done))
	r.metrics.messages.WithLabelValues(resultRefused).Add(float64(res.Refused))
	return res, nil
}

// failOn returns err when it can pass (or the step was stopped); any other
// error ends the operation failed, as nothing will make it go on.
func (r *Runner) failOn(ctx context.Context, o *projection.Operation, err error) error {
	if ctx.Err() != nil || commands.Transient(err) {
		return err
	}
	r.log.Error("bulk operation failed", "operation_id", o.ID, "err", err)
	if _, ferr := r.cfg.Writer.FinishOperation(ctx, o, err.Error()); ferr != nil && !errors.Is(ferr, commands.ErrOperationMoved) {
		return errors.Join(err, ferr)
	}
	return nil
}
