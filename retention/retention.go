// Package retention bounds what Waybill keeps (docs/retention.md): it
// expunges the payloads of settled messages after payload_after, and
// removes settled messages after settled_after (faulted ones after
// failed_after) from the live tables and the journal, once their events are
// archived. One process at a time runs a pass, under a session advisory
// lock; every process measures.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
)

// Config configures a Retention.
type Config struct {
	// Base's clock decides what is due: give it the Writer's Base.
	service.Base
	// Writer and DB are required.
	Writer *commands.Writer
	DB     *pgxpool.Pool
	// FeedGroups are the consumer groups of the feed whose places a removal
	// waits for, besides any other group in feed_offsets: a group named
	// here with no place yet holds every removal.
	FeedGroups []string
	// Batch is how many messages one removal batch, one archive file,
	// takes, and how many sent alerts one deletion takes. Default 250: a
	// batch is a burst of work (50 to 100 ms here), and the commands that
	// run beside it wait for the CPU it takes.
	Batch int
	// Expunges is how many payloads one query of the expunge takes.
	// Default 500.
	Expunges int
	// Concurrency is how many expunge commands run at once, so the
	// Writer's batcher writes them together. Default 32.
	Concurrency int
	// Share is the part of the time a pass may work: after each batch it
	// waits until the batch's time is that share of the time since the
	// batch began. Default 0.1.
	Share float64
	// Pause is the least wait after a batch. Default 50 ms.
	Pause time.Duration
	// Registerer takes the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
}

// Result counts what one pass did.
type Result struct {
	Expunged int
	// Settled and Faulted are the messages removed by settled_after and
	// by failed_after.
	Settled, Faulted int
	Batches          int
	ArchiveBytes     int64
	// Alerts are the sent alerts the pass deleted (see pruneAlerts).
	Alerts int
	// HeldByFeed says removals waited for a feed group.
	HeldByFeed bool
	// SettingsChanged says the settings changed while the pass ran: it
	// ended there, and the next begins at once.
	SettingsChanged bool
	// Skipped says another process holds the lease.
	Skipped bool
}

// Removed is every message the pass removed.
func (r Result) Removed() int { return r.Settled + r.Faulted }

// Retention runs passes on an interval that follows the periods set.
type Retention struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	// lease is held by the process that runs a pass, for the pass.
	lease *schema.Lease
	loop  *service.Loop
	wake  chan struct{}

	// cut, set by tests, is called at the named points of a removal batch
	// and after each query of the expunge; an error stops the pass there,
	// as a crash would, leaving the files as they are.
	cut func(point string) error
}

// New returns a Retention; Start sets it going.
func New(cfg Config) (*Retention, error) {
	if cfg.Writer == nil || cfg.DB == nil {
		return nil, errors.New("retention: Config.Writer and Config.DB are required")
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Batch <= 0 {
		cfg.Batch = 250
	}
	if cfg.Expunges <= 0 {
		cfg.Expunges = 500
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = 0.1
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 50 * time.Millisecond
	}
	log := cfg.Logger.With("component", "retention")
	return &Retention{cfg: cfg, log: log, metrics: newMetrics(cfg.Registerer),
		lease: schema.NewLease(cfg.DB, schema.KeyRetention, "retention", log, cfg.Registerer), loop: service.NewLoop(),
		wake: make(chan struct{}, 1)}, nil
}

// Start sets the loop going: a pass at once, then one every Interval of
// the settings it read, or at once after Wake. It returns at once; a first pass over a large
// backlog may take long, paced as every pass is.
func (r *Retention) Start(context.Context) error {
	if err := r.loop.Begin("retention"); err != nil {
		return err
	}
	r.loop.Go(func(ctx context.Context) {
		for {
			wait := time.Minute
			res, settings, err := r.pass(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				r.log.Error("retention pass", "err", err)
			case res.Expunged+res.Removed()+res.Alerts > 0:
				r.log.Info("retention pass", "expunged", res.Expunged, "settled", res.Settled, "faulted", res.Faulted,
					"batches", res.Batches, "archive_bytes", res.ArchiveBytes, "alerts", res.Alerts,
					"held_by_feed", res.HeldByFeed)
			}
			switch {
			case err == nil && res.SettingsChanged:
				wait = 0
			case err == nil:
				wait = Interval(settings)
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
	})
	return nil
}

// Wake tells the loop the settings changed, so it passes at once with the
// new periods rather than after the interval of the old ones (a minute
// while retention was off). A pass under way ends by itself at its next
// batch, as it finds the settings changed. It never blocks.
func (r *Retention) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stop ends the loop, cancelling a pass in progress (a batch commits whole
// or not at all, and the next pass settles its files), and waits for it
// within ctx. Safe to call twice.
func (r *Retention) Stop(ctx context.Context) { r.loop.Stop(ctx) }

// Interval is the time between passes: a tenth of the shortest period,
// from a second to a minute; a minute when no period is set.
func Interval(r lifecycle.Retention) time.Duration {
	d := r.Shortest() / 10
	if d <= 0 {
		return time.Minute
	}
	return min(max(d, time.Second), time.Minute)
}

// Pass reads the settings, measures, and, when this process gets the
// lease, expunges what is due, then removes what is due batch by batch.
// It ends early, with SettingsChanged, when it finds the settings changed
// before a query or at a commit: nothing is done under settings no longer
// in force.
func (r *Retention) Pass(ctx context.Context) (Result, error) {
	res, _, err := r.pass(ctx)
	return res, err
}

func (r *Retention) pass(ctx context.Context) (_ Result, _ lifecycle.Retention, err error) {
	defer service.Recovered(r.log, "retention pass", &err)
	began := time.Now()
	var res Result
	settings, err := r.cfg.Writer.Settings(ctx)
	if err != nil {
		return res, lifecycle.Retention{}, fmt.Errorf("retention: %w", err)
	}
	rs := settings.Retention
	// Whatever the settings: the charts' minutes are kept for a fixed
	// period, and every process may tidy them, as two at once agree.
	if _, _, err := projection.TidyMinutes(ctx, r.cfg.DB, r.cfg.Now()); err != nil {
		return res, rs, fmt.Errorf("retention: %w", err)
	}
	err = r.run(ctx, rs, &res)
	if merr := r.measure(ctx); err == nil {
		err = merr
	}
	r.metrics.passSeconds.Observe(time.Since(began).Seconds())
	if err != nil {
		return res, rs, fmt.Errorf("retention: %w", err)
	}
	return res, rs, nil
}

// run does the pass's work under the lease.
func (r *Retention) run(ctx context.Context, rs lifecycle.Retention, res *Result) (err error) {
	if !rs.Enabled() {
		return nil
	}
	leased, err := r.lease.Take(ctx)
	if err != nil {
		return err
	}
	if !leased {
		res.Skipped = true
		return nil
	}
	defer r.lease.Release()
	conn := r.lease.Conn()
	err = r.work(ctx, conn, rs, res)
	if errors.Is(err, errSettingsChanged) {
		res.SettingsChanged, err = true, nil
	}
	if err != nil {
		return err
	}
	if res.Expunged+res.Removed() > 0 {
		return r.journalPass(ctx, conn, res)
	}
	return nil
}

// work expunges, removes and prunes what rs makes due.
func (r *Retention) work(ctx context.Context, conn *pgxpool.Conn, rs lifecycle.Retention, res *Result) error {
	if rs.PayloadAfter != nil {
		if err := r.expunge(ctx, rs, res); err != nil {
			return fmt.Errorf("expunge: %w", err)
		}
	}
	if rs.SettledAfter != nil {
		if err := r.remove(ctx, conn, rs, res); err != nil {
			return fmt.Errorf("remove: %w", err)
		}
		if err := r.pruneAlerts(ctx, conn, rs, res); err != nil {
			return fmt.Errorf("prune alerts: %w", err)
		}
	}
	return nil
}

// errSettingsChanged ends a pass whose settings are no longer those in
// force.
var errSettingsChanged = errors.New("the settings changed")

// unchanged returns errSettingsChanged when the retention settings in
// force are no longer rs. A pass asks before each query, so that what it
// chooses next is chosen by the settings in force; the commits check them
// again under a lock, as a change may come between.
func (r *Retention) unchanged(ctx context.Context, rs lifecycle.Retention) error {
	settings, err := r.cfg.Writer.Settings(ctx)
	if err != nil {
		return err
	}
	if !settings.Retention.Equal(rs) {
		return errSettingsChanged
	}
	return nil
}

// expunge drops the due payloads, status by status, oldest first, a query
// of up to Expunges at a time, each through the Writer, which re-checks
// the rule in force on the locked message.
func (r *Retention) expunge(ctx context.Context, rs lifecycle.Retention, res *Result) error {
	for _, status := range lifecycle.ExpungeStatuses() {
		for {
			began := time.Now()
			if err := r.unchanged(ctx, rs); err != nil {
				return err
			}
			ids, err := projection.PayloadsDue(ctx, r.cfg.DB, status, r.cfg.Now().Add(-rs.PayloadAfter.D()), r.cfg.Expunges)
			if err != nil {
				return err
			}
			var (
				done atomic.Int64
				g    errgroup.Group
			)
			g.SetLimit(r.cfg.Concurrency)
			for _, id := range ids {
				g.Go(func() error {
					ok, err := r.cfg.Writer.ExpungePayload(ctx, id)
					if errors.Is(err, commands.ErrNotFound) {
						return nil // removed meanwhile
					}
					if ok {
						done.Add(1)
					}
					return err
				})
			}
			err = g.Wait()
			res.Expunged += int(done.Load())
			r.metrics.expunged.Add(float64(done.Load()))
			if err != nil {
				return err
			}
			if err := r.cutAt("expunged"); err != nil {
				return err
			}
			// A short query is the status's last; so is one in which
			// nothing was due any more, or the same ids would come back
			// at once.
			if len(ids) < r.cfg.Expunges || done.Load() == 0 {
				break
			}
			if err := r.pause(ctx, began); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove archives and removes the due messages, status by status, oldest
// first, a batch at a time. Each batch reads on from where the last ended,
// so the messages a batch leaves (pinned, changed by an operator, or not
// folding) are passed over until the next pass.
func (r *Retention) remove(ctx context.Context, conn *pgxpool.Conn, rs lifecycle.Retention, res *Result) error {
	a, err := openArchive(ctx, conn, rs.ArchiveDir)
	if err != nil {
		return err
	}
	for _, status := range lifecycle.SettledStatuses() {
		after, ok := rs.RemovalAfter(status)
		if !ok {
			continue
		}
		var from projection.DueAt
		for {
			began := time.Now()
			if err := r.unchanged(ctx, rs); err != nil {
				return err
			}
			ids, last, err := projection.RemovalsDue(ctx, conn, status, r.cfg.Now().Add(-after), r.cfg.Batch, from)
			if err != nil {
				return err
			}
			from = last
			if len(ids) == 0 {
				break
			}
			b, err := r.removeBatch(ctx, conn, a, rs, ids)
			if err != nil {
				return err
			}
			if b.held {
				res.HeldByFeed = true
				return nil
			}
			if b.removed > 0 {
				res.Batches++
				res.ArchiveBytes += b.bytes
				if status.Faulted() {
					res.Faulted += b.removed
				} else {
					res.Settled += b.removed
				}
			}
			// A short query is the last. A batch that removed nothing (an
			// operator acted on one of its messages) is tried again by
			// the next pass, the messages chosen again only if still due.
			if len(ids) < r.cfg.Batch {
				break
			}
			if err := r.pause(ctx, began); err != nil {
				return err
			}
		}
	}
	return nil
}

// pruneAlerts deletes, a batch at a time, the alerts raised longer ago
// than the longest removal period that every channel owed has taken and
// whose events the alerter's saved place has passed (alerts.Prune). A
// sent alert is kept only so that its event, handled again after a crash
// of the alerter, raises nothing twice. An alert still owed to a channel
// stays until it is sent.
func (r *Retention) pruneAlerts(ctx context.Context, conn *pgxpool.Conn, rs lifecycle.Retention, res *Result) error {
	var longest time.Duration
	for _, status := range lifecycle.SettledStatuses() {
		if after, ok := rs.RemovalAfter(status); ok {
			longest = max(longest, after)
		}
	}
	for {
		began := time.Now()
		if err := r.unchanged(ctx, rs); err != nil {
			return err
		}
		n, err := alerts.Prune(ctx, conn, r.cfg.Now().Add(-longest), r.cfg.Batch)
		if err != nil {
			return err
		}
		res.Alerts += n
		r.metrics.alerts.Add(float64(n))
		if n < r.cfg.Batch {
			return nil
		}
		if err := r.pause(ctx, began); err != nil {
			return err
		}
	}
}

// pause waits so that the work since began is Share of the time, and at
// least Pause: a pass takes at most that share of a connection and a core.
func (r *Retention) pause(ctx context.Context, began time.Time) error {
	worked := time.Since(began)
	wait := time.Duration(float64(worked) * (1/r.cfg.Share - 1))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(max(r.cfg.Pause, wait)):
		return nil
	}
}

// journalPass appends the pass's counts to the retention stream.
func (r *Retention) journalPass(ctx context.Context, conn *pgxpool.Conn, res *Result) error {
	version, err := journal.StreamVersion(ctx, conn, journal.RetentionStream)
	if err != nil {
		return fmt.Errorf("journal the pass: %w", err)
	}
	b := &pgx.Batch{}
	err = journal.Queue(b, journal.Event{RecordedAt: journal.StoredTime(r.cfg.Now()), Stream: journal.RetentionStream,
		Version: version + 1, Actor: journal.ActorRetention, Payload: &journal.RetentionPass{Expunged: res.Expunged,
			Removed: res.Removed(), Batches: res.Batches, ArchiveBytes: res.ArchiveBytes}})
	if err == nil {
		err = conn.SendBatch(ctx, b).Close()
	}
	if err != nil {
		return fmt.Errorf("journal the pass: %w", err)
	}
	return nil
}

// measure sets the gauges of the oldest settled messages still live.
func (r *Retention) measure(ctx context.Context) error {
	byStatus, err := projection.OldestSettled(ctx, r.cfg.DB)
	if err != nil {
		return fmt.Errorf("measure: %w", err)
	}
	oldest := map[string]time.Time{}
	for status, at := range byStatus {
		if class := classOf(status); oldest[class].IsZero() || at.Before(oldest[class]) {
			oldest[class] = at
		}
	}
	now := r.cfg.Now()
	for _, class := range []string{classSettled, classFaulted} {
		age := 0.0
		if t := oldest[class]; !t.IsZero() {
			age = max(0, now.Sub(t).Seconds())
		}
		r.metrics.oldest.WithLabelValues(class).Set(age)
	}
	return nil
}

// The classes of the metrics: messages that settled, and faulted ones.
const (
	classSettled = "settled"
	classFaulted = "faulted"
)

func classOf(s lifecycle.MessageStatus) string {
	if s.Faulted() {
		return classFaulted
	}
	return classSettled
}

// ids of messages, as streams.
func streamsOf(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = journal.MessageStream(id)
	}
	return out
}
