// Package sweep runs the recovery loop every server process has: it expires
// the leases of attempts whose worker went away, queues the scheduled
// deliveries whose time has come, wakes due deliveries again
// (so a lost wake-up, or a retry whose process went away, costs time, never
// a delivery) and stalls those woken
// max_dispatches times unclaimed, fails deliveries whose receipt is
// overdue, passes on the lanes an earlier build left owed, and measures the deliveries for the metrics. Each step is a
// command of the core, conditional on the state it finds, so any number of
// processes may sweep one database and each change happens once.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// Config configures a Sweeper.
type Config struct {
	// Base's clock decides what is due: give the Sweeper the Writer's Base.
	service.Base
	// Writer and DB are required.
	Writer *commands.Writer
	DB     *pgxpool.Pool
	// Interval is the time between passes. Default 5 s.
	Interval time.Duration
	// Batch is how many deliveries one query of a step takes. Default 500.
	Batch int
	// Concurrency is how many of a batch's commands run at once, so the
	// Writer can write them together. Default 32.
	Concurrency int
	// Pause is the wait between two batches of a step, so a large backlog
	// does not hold the database for a whole pass. Default 50 ms.
	Pause time.Duration
	// WakePerTarget is how many of a target's due deliveries one pass
	// wakes, the most overdue first. Default 100.
	WakePerTarget int
	// Registerer takes the sweep's metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
}

// Result counts what one pass did.
type Result struct {
	Expired, Woken, Stalled, TimedOut int
	// Released counts blocked deliveries let go because their target keeps
	// no order any more, or because their lane's head settled without
	// passing the lane on; Reported the lanes reported held too long.
	Released, Reported int
	// Due counts the scheduled deliveries queued as their time came.
	Due int
}

// Sweeper runs passes on an interval.
type Sweeper struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	loop *service.Loop
}

// New returns a Sweeper; Start sets it going.
func New(cfg Config) (*Sweeper, error) {
	if cfg.Writer == nil || cfg.DB == nil {
		return nil, errors.New("sweep: Config.Writer and Config.DB are required")
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 50 * time.Millisecond
	}
	if cfg.WakePerTarget <= 0 {
		cfg.WakePerTarget = 100
	}
	return &Sweeper{cfg: cfg, log: cfg.Logger.With("component", "sweep"), metrics: newMetrics(cfg.Registerer),
		loop: service.NewLoop()}, nil
}

// Start runs the first pass, then one every Interval until Stop.
func (s *Sweeper) Start(ctx context.Context) error {
	if err := s.loop.Begin("sweep"); err != nil {
		return err
	}
	if _, err := s.Pass(ctx); err != nil {
		s.loop.Abandon()
		return err
	}
	s.loop.Go(func(ctx context.Context) {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
					s.log.Error("sweep pass", "err", err)
				}
			}
		}
	})
	return nil
}

// Stop ends the loop, cancelling a pass in progress (each of its commands
// commits whole or not at all), and waits for it; a Stop during Start's
// first pass waits for that pass, within ctx. Safe to call twice.
func (s *Sweeper) Stop(ctx context.Context) { s.loop.Stop(ctx) }

// Pass runs each step once over everything due, counts the successes the
// Writer has held from the targets' breaker windows (Writer.CountHeld),
// then updates the gauges.
func (s *Sweeper) Pass(ctx context.Context) (_ Result, err error) {
	defer service.Recovered(s.log, "sweep pass", &err)
	began := time.Now()
	var r Result
	// Whether a target keeps order, and its head_alert_after, are read
	// afresh each pass: a release out of turn must follow the change
	// that allows it.
	s.cfg.Writer.Invalidate()
	targets, err := s.cfg.Writer.Targets(ctx)
	if err != nil {
		return r, fmt.Errorf("sweep: %w", err)
	}
	var fifo, alerted []string
	var after []time.Duration
	for _, t := range targets {
		if t.Ordering.FIFO() {
			fifo = append(fifo, t.Name)
			if d := t.Ordering.HeadAlertAfter.D(); d > 0 {
				alerted, after = append(alerted, t.Name), append(after, d)
			}
		}
	}
	now := func(sel func(context.Context, journal.Querier, time.Time, int) ([]uuid.UUID, error), n int) func() ([]uuid.UUID, error) {
		return func() ([]uuid.UUID, error) { return sel(ctx, s.cfg.DB, s.cfg.Now(), n) }
	}
	released := func() ([]uuid.UUID, error) { return projection.BlockedOutOfOrder(ctx, s.cfg.DB, fifo, s.cfg.Batch) }
	owed := func() ([]uuid.UUID, error) { return projection.OwedLanes(ctx, s.cfg.DB, fifo, s.cfg.Batch) }
	held := func() ([]uuid.UUID, error) {
		return projection.HeldLaneHeads(ctx, s.cfg.DB, alerted, after, s.cfg.Now(), s.cfg.Batch)
	}
	w := s.cfg.Writer
	err = errors.Join(
		s.step(ctx, "expire_leases", false, now(projection.ExpiredLeases, s.cfg.Batch),
			func(id uuid.UUID) (journal.Kind, error) { return w.ExpireLease(ctx, id) }, &r),
		s.step(ctx, "scheduled_due", false, now(projection.ScheduledDue, s.cfg.Batch),
			func(id uuid.UUID) (journal.Kind, error) { return w.ComeDue(ctx, id) }, &r),
		s.step(ctx, "wake", true, now(projection.SweepDue, s.cfg.WakePerTarget),
			func(id uuid.UUID) (journal.Kind, error) { return w.Wake(ctx, id) }, &r),
		s.step(ctx, "time_out_receipts", false, now(projection.OverdueReceipts, s.cfg.Batch),
			func(id uuid.UUID) (journal.Kind, error) { return w.TimeoutReceipt(ctx, id) }, &r),
		s.step(ctx, "release_blocked", false, released,
			func(id uuid.UUID) (journal.Kind, error) { return w.ReleaseBlocked(ctx, id) }, &r),
		s.step(ctx, "pass_lanes_on", false, owed,
			func(id uuid.UUID) (journal.Kind, error) { return w.PassLaneOn(ctx, id) }, &r),
		s.step(ctx, "report_held_lanes", false, held,
			func(id uuid.UUID) (journal.Kind, error) { return w.ReportLaneHeld(ctx, id) }, &r),
	)
	// The held successes are counted and the gauges set whatever the
	// steps came to: a command that keeps failing must not freeze the
	// gauges that would show what it leaves behind.
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Name
	}
	err = errors.Join(err, w.CountHeld(ctx), s.measure(ctx, names))
	s.metrics.passSeconds.Observe(time.Since(began).Seconds())
	if err != nil {
		return r, fmt.Errorf("sweep: %w", err)
	}
	if r != (Result{}) {
		s.log.Info("sweep pass", "expired", r.Expired, "woken", r.Woken, "stalled", r.Stalled, "timed_out", r.TimedOut,
			"released", r.Released, "reported", r.Reported, "due", r.Due)
	}
	return r, nil
}

// step takes the deliveries of one query (run afresh for each batch)
// batch by batch and runs the command on each, until a batch comes back
// short; with once, it takes one batch.
func (s *Sweeper) step(ctx context.Context, name string, once bool, query func() ([]uuid.UUID, error),
	run func(uuid.UUID) (journal.Kind, error), r *Result) error {
	for {
		ids, err := query()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// The commands run side by side so the Writer's batcher writes
		// many in one transaction; each decides on its own delivery.
		var (
			mu      sync.Mutex
			changed int
			g       errgroup.Group
		)
		g.SetLimit(s.cfg.Concurrency)
		for _, id := range ids {
			g.Go(func() error {
				kind, err := run(id)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				mu.Lock()
				defer mu.Unlock()
				switch kind {
				case journal.KindDeliveryLeaseExpired:
					// ExpireLease wakes the delivery in the same write.
					r.Expired++
					r.Woken++
				case journal.KindDeliveryWoken:
					r.Woken++
				case journal.KindDeliveryStalled:
					r.Stalled++
				case journal.KindReceiptTimedOut:
					r.TimedOut++
				case journal.KindDeliveryUnblocked:
					r.Released++
				case journal.KindDeliveryDue:
					r.Due++
				case journal.KindDeliveryLaneHeld:
					r.Reported++
				default:
					return nil
				}
				changed++
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		s.metrics.rows.WithLabelValues(name).Add(float64(changed))
		// A short batch is the last; so is one in which another process
		// did every step, or the same rows would come back at once.
		if once || len(ids) < s.cfg.Batch || changed == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.cfg.Pause):
		}
	}
}

// measure sets the gauges: the deliveries of each of the targets by state
// and how long its most overdue wake-up has been due (every series at zero
// from a target's first pass; a deleted target's removed), the due
// deliveries, and the journal's last position (its rate is the append
// rate).
func (s *Sweeper) measure(ctx context.Context, targets []string) error {
	now := s.cfg.Now()
	var position int64
	b := &pgx.Batch{}
	counts := projection.QueueTargetCounts(b)
	oldest := projection.QueueTargetsOldestDue(b, now, targets)
	due := projection.QueueDue(b, now)
	journal.QueueLastPosition(b, &position)
	if err := s.cfg.DB.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("measure: %w", err)
	}
	s.metrics.track(targets)
	byTarget, oldestDue := counts(), oldest()
	for _, t := range targets {
		for _, state := range lifecycle.CountedStates {
			s.metrics.deliveries.WithLabelValues(t, string(state)).Set(float64(byTarget[t][state]))
		}
		s.metrics.oldestDue.WithLabelValues(t).Set(oldestDue[t].Seconds())
	}
	n, _ := due()
	s.metrics.due.Set(float64(n))
	s.metrics.journalPosition.Set(float64(position))
	return s.measureHealth(ctx, now)
}

// healthStates are the states of waybill_target_health.
var healthStates = []lifecycle.HealthState{lifecycle.HealthClosed, lifecycle.HealthOpen, lifecycle.HealthHalfOpen,
	lifecycle.HealthThrottled, lifecycle.HealthDisabled}

// measureHealth sets the gauges of the targets' health, a deleted
// target's series gone with it.
func (s *Sweeper) measureHealth(ctx context.Context, now time.Time) error {
	targets, err := s.cfg.Writer.Targets(ctx)
	if err == nil {
		targets, err = projection.WithHealth(ctx, s.cfg.DB, targets, now)
	}
	if err != nil {
		return fmt.Errorf("measure target health: %w", err)
	}
	s.metrics.targetHealth.Reset()
	s.metrics.targetHeld.Reset()
	for _, t := range targets {
		for _, state := range healthStates {
			v := 0.0
			if t.Health.State == state {
				v = 1
			}
			s.metrics.targetHealth.WithLabelValues(t.Name, string(state)).Set(v)
		}
		s.metrics.targetHeld.WithLabelValues(t.Name).Set(float64(*t.Health.Held))
	}
	return nil
}
