package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

// OnlinePhase is a step of an online rebuild.
type OnlinePhase string

// The phases of an online rebuild, in their order; it ends done or failed.
const (
	PhaseFold    OnlinePhase = "fold"
	PhaseCatchUp OnlinePhase = "catch_up"
	PhaseSwitch  OnlinePhase = "switch"
	PhaseAudit   OnlinePhase = "audit"
	PhaseDone    OnlinePhase = "done"
	PhaseFailed  OnlinePhase = "failed"
)

// OnlineProgress is where an online rebuild stands.
type OnlineProgress struct {
	Phase OnlinePhase
	// Events is the number of journal events folded so far, Total the
	// number in the fold's snapshot.
	Events, Total int
	// Lag is the number of events the last catch-up round read: how far
	// the shadow tables were behind the journal.
	Lag int
	// Rounds is the number of catch-up rounds so far.
	Rounds int
	// LockHeld is how long the switch held the live tables, once it has.
	LockHeld time.Duration
}

// OnlineOptions tune an online rebuild; the zero value is the default.
type OnlineOptions struct {
	// Progress, when set, is told each phase and each catch-up round.
	Progress func(OnlineProgress)
	// Pause, when set, is called in each of the fold, catch-up and switch
	// phases at a point where the work is under way and uncommitted, so a
	// test can end the process there.
	Pause func(OnlinePhase)
	// Log receives the switch's measures; slog.Default() when nil.
	Log *slog.Logger
	// Share is the share of the wall time, above 0 and at most 1, the
	// fold and its copy into the shadow tables work, the rest left to the
	// servers beside them; 0 means DefaultShare. Below 1 they run on one
	// connection, and the shadow indexes are built without parallel
	// workers; 1 runs at full speed, as an offline rebuild does.
	Share float64
}

// caughtUp is the lag below which the catch-up stops and the switch
// starts: the switch applies the rest with the live tables locked.
const caughtUp = 2000

// catchUpRead is the number of events a catch-up read takes at a time.
const catchUpRead = 8192

// OnlineRebuild rebuilds the projections beside running servers, which
// keep serving (docs/operations.md, "Online rebuild"). It folds the
// journal in one snapshot into shadow tables (schema.CreateShadow), then
// catches up with the events committed since, rewriting the rows they
// touched, until little is left; then it switches (schema.SwitchShadow):
// with the live tables locked it applies the last events and swaps the
// shadow tables in. Last it audits the new tables against the fold, read
// in a snapshot as the audit reads. A crash at any point leaves the live
// tables as they were, and the next run starts over. It holds
// schema.LockOnline throughout, and the retention lease (a pass removes
// streams the fold holds), waiting for a pass that runs. Both are session
// locks, lost with their sessions (a restart of PostgreSQL, a terminated
// backend, a failover): each write into the shadow tables and the switch
// confirm them before they commit, and a run that lost one stops with an
// error matching schema.ErrLockLost, having switched nothing in.
func OnlineRebuild(ctx context.Context, db *pgxpool.Pool, opt OnlineOptions) (*Report, error) {
	if opt.Share == 0 {
		opt.Share = DefaultShare
	}
	if !(opt.Share > 0 && opt.Share <= 1) {
		return nil, &lifecycle.FieldError{Field: "share", Problem: fmt.Sprintf("is %g: a share of the time above 0 and at most 1 is allowed", opt.Share)}
	}
	o := &online{db: db, opt: opt, versions: map[string]int{}, pending: map[string][]journal.Event{},
		dirty: map[uuid.UUID]struct{}{}}
	if o.opt.Log == nil {
		o.opt.Log = slog.Default()
	}
	r, err := o.run(ctx)
	if err != nil {
		o.progress.Phase = PhaseFailed
		o.tell()
		return nil, fmt.Errorf("online rebuild: %w", err)
	}
	return r, nil
}

// online is the state of an online rebuild: the fold, which stream
// versions it holds, and what it has changed since it last wrote the
// shadow tables.
type online struct {
	db  *pgxpool.Pool
	opt OnlineOptions
	// lock and lease are the online rebuild's lock and the retention
	// lease, which held checks.
	lock  *schema.Lock
	lease *schema.Lease
	f     *Folded
	// versions holds the version of the last event folded of each
	// stream: an event at or below it was folded already (reading from a
	// mark returns some the snapshot held). pending holds events ahead of
	// their stream's next version, which commit order can bring first.
	versions map[string]int
	pending  map[string][]journal.Event
	mark     journal.Mark
	// dirty holds the messages changed since the shadow tables were last
	// written; delta the counts' change, each dirty message taken out as
	// it was then; minutes the outcome counts as last written.
	dirty    map[uuid.UUID]struct{}
	delta    Tally
	minutes  map[minuteKey]int64
	progress OnlineProgress
}

func (o *online) run(ctx context.Context) (*Report, error) {
	var err error
	if o.lock, err = schema.LockOnline(ctx, o.db); err != nil {
		return nil, err
	}
	defer o.lock.Release()
	if err := schema.CheckJournal(ctx, o.db); err != nil {
		return nil, err
	}
	o.lease = schema.NewLease(o.db, schema.KeyRetention, "retention", o.opt.Log, nil)
	for {
		held, err := o.lease.Take(ctx)
		if err != nil {
			return nil, err
		}
		if held {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	defer o.lease.Release()

	o.progress.Phase = PhaseFold // told with the snapshot's size
	if err := o.fold(ctx); err != nil {
		return nil, err
	}
	o.phase(PhaseCatchUp)
	for {
		n, err := o.catchUp(ctx)
		if err != nil {
			return nil, err
		}
		if n < caughtUp {
			break
		}
	}
	o.phase(PhaseSwitch)
	for {
		held, err := schema.SwitchShadow(ctx, o.db, func(tx pgx.Tx) error {
			n, err := o.readAll(ctx, tx, journal.ReadVisible, false)
			if err != nil {
				return err
			}
			o.progress.Lag = n
			if err := o.write(ctx, tx); err != nil {
				return err
			}
			// What the journal does not hold of the targets' health (a
			// breaker's window of outcomes, its probe) goes on.
			if _, err := tx.Exec(ctx, `INSERT INTO target_health AS h (target, probe_until, window_start, window_requests, window_failures, failing_since)
				SELECT target, probe_until, window_start, window_requests, window_failures, failing_since FROM public.target_health
				ON CONFLICT (target) DO UPDATE SET probe_until = excluded.probe_until, window_start = excluded.window_start,
					window_requests = excluded.window_requests, window_failures = excluded.window_failures, failing_since = excluded.failing_since`); err != nil {
				return fmt.Errorf("carry the targets' health over: %w", err)
			}
			o.pause(PhaseSwitch)
			// With the live tables and the journal held: a pass that
			// takes the lease from here on removes nothing before the
			// switch commits, and then removes from the new tables.
			return o.held(ctx)
		})
		if errors.Is(err, schema.ErrSwitchBusy) {
			o.opt.Log.Info("online rebuild: the live tables are busy; catching up and switching again")
			if _, err := o.catchUp(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		o.progress.LockHeld = held
		o.opt.Log.Info("online rebuild switched the projection tables", "lock_held", held, "events_applied", o.progress.Lag)
		if err := schema.DropRetired(ctx, o.db); err != nil {
			o.opt.Log.Warn("online rebuild: the replaced tables stay until the next switch", "err", err)
		}
		break
	}
	o.phase(PhaseAudit)
	r, err := o.audit(ctx)
	if err != nil {
		return nil, err
	}
	o.phase(PhaseDone)
	return r, nil
}

// fold folds the journal in one snapshot and creates the shadow tables
// from it; the mark is the snapshot's horizon, from which every event the
// snapshot missed is read.
func (o *online) fold(ctx context.Context) error {
	rd := defaultReading
	rd.versions = o.versions
	rd.pace = newPacer(o.opt.Share)
	if rd.pace != nil {
		rd.connections = 1
	}
	s, err := openSnapshot(ctx, o.db, rd.connections)
	if err != nil {
		return err
	}
	if o.mark, err = journal.Horizon(ctx, s.queriers()[0]); err == nil {
		o.progress.Total, err = journal.Count(ctx, s.queriers()[0])
		o.tell()
	}
	if err == nil {
		o.f, err = foldSnapshot(ctx, s, rd)
	}
	s.close()
	if err != nil {
		return err
	}
	o.minutes = maps.Clone(o.f.outcomes.minutes)
	o.progress.Events = o.f.Events
	o.tell()
	return schema.CreateShadow(ctx, o.db, func(tx pgx.Tx) error {
		if rd.pace != nil {
			// Each index is then built by this backend alone, one core,
			// after the paced copy.
			if _, err := tx.Exec(ctx, `SET LOCAL max_parallel_maintenance_workers = 0`); err != nil {
				return fmt.Errorf("build the shadow indexes serially: %w", err)
			}
		}
		if err := copyFolded(ctx, tx, o.f, rd.pace); err != nil {
			return err
		}
		o.pause(PhaseFold)
		return o.held(ctx)
	})
}

// catchUp folds the events committed since the last read and rewrites
// what they changed in the shadow tables; it returns how many it read.
func (o *online) catchUp(ctx context.Context) (int, error) {
	n, err := o.readAll(ctx, o.db, journal.ReadCommitted, true)
	if err != nil {
		return 0, err
	}
	err = schema.InShadow(ctx, o.db, func(tx pgx.Tx) error {
		if err := o.write(ctx, tx); err != nil {
			return err
		}
		o.pause(PhaseCatchUp)
		return o.held(ctx)
	})
	if err != nil {
		return 0, fmt.Errorf("catch up: %w", err)
	}
	o.progress.Rounds++
	o.progress.Lag = n
	o.tell()
	return n, nil
}

// readAll folds every event read returns after the mark, in the order of
// their positions. With journal.ReadCommitted the mark moves on to the
// last; journal.ReadVisible may return events past older transactions
// that commit later, so the mark stays, and a later read returns again
// what was folded (take skips it).
//
// The reads come in the order of transaction ids, which two transactions
// on one lane (or one receiver's id) may hold the other way round from
// their events' positions: the one that locked it first may have taken
// its id later. The second cannot commit before the first, and one that
// holds back the reader's horizon holds back every later id, so both come
// in one call, whose events are folded sorted.
func (o *online) readAll(ctx context.Context, q journal.Querier,
	read func(context.Context, journal.Querier, journal.Mark, int) ([]journal.Event, []journal.Mark, error), moveMark bool) (int, error) {
	var all []journal.Event
	at := o.mark
	for {
		events, marks, err := read(ctx, q, at, catchUpRead)
		if err != nil {
			return len(all), err
		}
		all = append(all, events...)
		if len(events) > 0 {
			at = marks[len(marks)-1]
		}
		if len(events) < catchUpRead {
			break
		}
	}
	slices.SortFunc(all, func(a, b journal.Event) int { return cmp.Compare(a.Position, b.Position) })
	for _, e := range all {
		o.take(e)
	}
	if moveMark {
		o.mark = at
	}
	return len(all), nil
}

// take folds e unless it was folded already; one ahead of its stream's
// next version waits in pending for the ones before it.
func (o *online) take(e journal.Event) {
	have := o.versions[e.Stream]
	switch {
	case e.Version <= have:
		return
	case e.Version > have+1:
		o.pending[e.Stream] = append(o.pending[e.Stream], e)
		return
	}
	o.apply(e)
	for waiting := o.pending[e.Stream]; len(waiting) > 0; waiting = o.pending[e.Stream] {
		i := slices.IndexFunc(waiting, func(w journal.Event) bool { return w.Version == o.versions[e.Stream]+1 })
		if i < 0 {
			break
		}
		next := waiting[i]
		o.pending[e.Stream] = slices.Delete(waiting, i, i+1)
		o.apply(next)
	}
	if len(o.pending[e.Stream]) == 0 {
		delete(o.pending, e.Stream)
	}
}

// apply folds e, taking the message it changes out of the counts as it
// was before its first change since the last write.
func (o *online) apply(e journal.Event) {
	o.versions[e.Stream] = e.Version
	if id, err := uuid.Parse(e.Stream); err == nil {
		if _, ok := o.dirty[id]; !ok {
			o.dirty[id] = struct{}{}
			if m := o.f.Messages[id]; m != nil {
				o.delta.Add(m, -1)
			}
		}
	}
	_ = o.f.fold(e)
	o.progress.Events = o.f.Events
}

// write rewrites in the shadow tables, which tx's names resolve to, what
// the events folded since the last write changed: the rows of each
// changed message (deleted and copied again), the correlations that name
// one, the counts by their change, and whole the lanes, the operations
// and the targets' health, which are few.
func (o *online) write(ctx context.Context, tx pgx.Tx) error {
	ids := slices.SortedFunc(maps.Keys(o.dirty), func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	messages := make([]*Message, 0, len(ids))
	for _, id := range ids {
		if m := o.f.Messages[id]; m != nil {
			messages = append(messages, m)
			o.delta.Add(m, 1)
		}
	}
	correlations := map[CorrelationKey]Correlation{}
	var targets, externalIDs []string
	if len(ids) > 0 {
		for k, c := range o.f.Correlations {
			if _, ok := o.dirty[c.MessageID]; ok {
				correlations[k] = c
				targets, externalIDs = append(targets, k.Target), append(externalIDs, k.ExternalID)
			}
		}
	}
	for k, n := range o.f.outcomes.minutes {
		if d := n - o.minutes[k]; d != 0 {
			if o.delta.minutes == nil {
				o.delta.minutes = map[minuteKey]int64{}
			}
			o.delta.minutes[k] = d
		}
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM deliveries WHERE message_id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM messages WHERE id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM callbacks WHERE message_id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM correlations c WHERE c.message_id = ANY($1::uuid[])
		OR (c.target, c.external_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))`, ids, targets, externalIDs)
	b.Queue(`DELETE FROM lanes`)
	b.Queue(`DELETE FROM operations`)
	b.Queue(`DELETE FROM target_health`)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("clear changed rows: %w", err)
	}
	if err := copyMessages(ctx, tx, messages, correlations, false); err != nil {
		return err
	}
	if err := copyHealth(ctx, tx, o.f); err != nil {
		return err
	}
	if err := copyLanes(ctx, tx, o.f.lanes.All()); err != nil {
		return err
	}
	if err := copyOperations(ctx, tx, o.f.opsInOrder); err != nil {
		return err
	}
	b = &pgx.Batch{}
	o.delta.Queue(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store the counts: %w", err)
	}
	// Forgotten before the commit: a transaction that fails ends the
	// rebuild, whose next run starts over.
	o.dirty, o.delta = map[uuid.UUID]struct{}{}, Tally{}
	o.minutes = maps.Clone(o.f.outcomes.minutes)
	return nil
}

// audit compares the new tables with the fold in a snapshot, as Audit
// does, after folding what the snapshot holds beyond the switch.
func (o *online) audit(ctx context.Context) (*Report, error) {
	s, err := openSnapshot(ctx, o.db, defaultReading.connections)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := o.readAll(ctx, s.queriers()[0], journal.ReadVisible, false); err != nil {
		return nil, err
	}
	o.f.finish()
	return checkTables(ctx, s.queriers(), o.f, uuid.Nil)
}

// held confirms, at the end of a transaction that writes the shadow
// tables or switches them in, that the sessions holding the rebuild's
// locks still live and hold them, with a query on each lock's own
// connection. A session lock is held exactly while its session lives, and
// a session that ended does not come back: so a lock confirmed held was
// held throughout since it was taken. Lost, the rebuild stops before the
// commit: without the online rebuild's lock another run may have made the
// shadow tables anew (and this one would write into its tables); without
// the retention lease a pass may have removed messages the fold holds,
// whose rows the catch-up would leave in (the catch-up folds new events,
// and a removal takes nothing out of the fold).
func (o *online) held(ctx context.Context) error {
	if err := o.lock.Check(ctx); err != nil {
		if errors.Is(err, schema.ErrLockLost) {
			return fmt.Errorf("%w; another online rebuild may have started and made the shadow tables anew, so this one stops, with the live tables as they were: run it again", err)
		}
		return err
	}
	if err := o.lease.Check(ctx); err != nil {
		if errors.Is(err, schema.ErrLockLost) {
			return fmt.Errorf("%w; a retention pass may have removed messages the fold holds, so this rebuild stops, with the live tables as they were: run it again", err)
		}
		return err
	}
	return nil
}

func (o *online) phase(p OnlinePhase) {
	o.progress.Phase = p
	o.tell()
}

func (o *online) tell() {
	if o.opt.Progress != nil {
		o.opt.Progress(o.progress)
	}
}

func (o *online) pause(p OnlinePhase) {
	if o.opt.Pause != nil {
		o.opt.Pause(p)
	}
}
