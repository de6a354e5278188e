package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// batchResult is what one removal batch did.
type batchResult struct {
	removed int
	bytes   int64
	// held says every message due was behind a feed group's place.
	held bool
}

// removeBatch archives and removes the messages of ids that are due, that
// every feed group has passed, and that nothing still pins (an outcome
// callback still to be made, a lane still open), as one batch
// (docs/retention.md):
// their streams are read and folded, written to pending files, and
// removed in one transaction with the record of the batch, which checks
// the fold against the locked rows; the files take their final names once
// it has committed.
func (r *Retention) removeBatch(ctx context.Context, conn *pgxpool.Conn, a *archive, rs lifecycle.Retention,
	ids []uuid.UUID) (batchResult, error) {
	var out batchResult
	events, marks, err := journal.ReadStreams(ctx, conn, streamsOf(ids))
	if err != nil {
		return out, err
	}
	horizon, err := feedHorizon(ctx, conn, r.cfg.FeedGroups)
	if err != nil {
		return out, err
	}
	type stream struct {
		name      string
		m         projection.Message
		held, bad bool
	}
	var order []*stream
	streams := map[string]*stream{}
	for i, e := range events {
		s := streams[e.Stream]
		if s == nil {
			s = &stream{name: e.Stream}
			streams[e.Stream] = s
			order = append(order, s)
		}
		s.bad = s.bad || projection.Apply(&s.m, e) != nil
		s.held = s.held || horizon != nil && after(marks[i], *horizon)
	}
	now := journal.StoredTime(r.cfg.Now())
	var (
		keep             []*projection.Message
		settled, faulted int
		anyHeld          bool
	)
	for _, s := range order {
		m := &s.m
		switch {
		case s.bad:
			// The audit names it; it stays until it folds.
			r.log.Warn("a message's stream does not fold; retention leaves it", "stream", s.name)
			continue
		case !rs.RemovalDue(m.Status, m.UpdatedAt, now):
			continue
		case s.held:
			anyHeld = true
			continue
		}
		keep = append(keep, m)
	}
	keep, err = r.unpinned(ctx, conn, keep)
	if err != nil {
		return out, err
	}
	for _, m := range keep {
		if m.Status.Faulted() {
			faulted++
		} else {
			settled++
		}
	}
	if len(keep) == 0 {
		out.held = anyHeld
		return out, nil
	}
	kept := map[string]bool{}
	for _, m := range keep {
		kept[journal.MessageStream(m.ID)] = true
	}
	archived := slices.DeleteFunc(events, func(e journal.Event) bool { return !kept[e.Stream] })
	// Retention's own older records go with the batch, all but the last
	// batch's, which holds the totals, once settled_after has passed
	// since they were written.
	records, err := r.oldRecords(ctx, conn, a, rs, horizon, now)
	if err != nil {
		return out, err
	}
	var recordPositions []int64
	for _, e := range records {
		recordPositions = append(recordPositions, e.Position)
	}
	archived = append(archived, records...)
	slices.SortFunc(archived, func(x, y journal.Event) int { return cmp.Compare(x.Position, y.Position) })

	batch, total := int64(1), journal.RetentionTotal{}
	if a.last != nil {
		batch, total = a.last.Batch+1, a.last.Total
	}
	w, err := a.write(batch, archived, settled, faulted, len(keep), len(records), r.cfg.Now())
	if err != nil {
		return out, err
	}
	if err := r.cutAt("written"); err != nil {
		return out, err
	}
	record := &journal.RetentionArchived{Archive: a.id, ArchiveDir: a.root, Batch: batch, File: w.file, SHA256: w.manifest.SHA256,
		Bytes: w.manifest.Bytes, Manifest: w.manifestName, ManifestSHA256: w.manifestSHA256, Messages: len(keep),
		Events: len(archived), Records: len(records), FirstPosition: archived[0].Position,
		LastPosition: archived[len(archived)-1].Position, Settled: settled, Faulted: faulted,
		SettledAfter: rs.SettledAfter, FailedAfter: rs.FailedAfter}
	record.Total = total.Add(record)
	version, committed, err := r.commit(ctx, conn, rs, keep, archived, recordPositions, record)
	if !committed {
		// Nothing was removed: the files go, and the messages are chosen
		// again if still due. A commit whose answer was lost is no
		// rollback: its files stay for the next pass to settle.
		if !errors.Is(err, errCommitUnknown) {
			if derr := w.discard(); derr != nil {
				err = errors.Join(err, fmt.Errorf("discard the files of batch %d: %w", batch, derr))
			}
		}
		return out, err
	}
	a.last, a.lastVersion = record, version
	r.metrics.removed.WithLabelValues(classSettled).Add(float64(settled))
	r.metrics.removed.WithLabelValues(classFaulted).Add(float64(faulted))
	r.metrics.archiveBytes.Add(float64(record.Bytes))
	out.removed, out.bytes = len(keep), record.Bytes
	if err := r.cutAt("committed"); err != nil {
		return out, err
	}
	if err := a.finish(w); err != nil {
		return out, fmt.Errorf("name the files of batch %d: %w", batch, err)
	}
	return out, nil
}

// errCommitUnknown says the COMMIT of a batch failed without telling
// whether it took effect.
var errCommitUnknown = errors.New("the commit's outcome is unknown")

// commit removes the messages in one transaction on conn, the lease's
// connection: it reads the settings and locks them until it ends, so that
// none commits meanwhile, and checks that they are still rs; it locks the
// messages' rows in id order, as the commands do, and checks that each is
// still at the version archived and still due at the clock; then it
// appends the record of the batch, deletes the streams, the older records,
// the payloads and the rows, and commits. It reports false, with no error,
// when a message changed, and errSettingsChanged when the settings did
// (nothing is written either way), and the record's version in the
// retention stream when it committed.
func (r *Retention) commit(ctx context.Context, conn *pgxpool.Conn, rs lifecycle.Retention, keep []*projection.Message,
	archived []journal.Event, records []int64, record *journal.RetentionArchived) (int, bool, error) {
	ids := make([]uuid.UUID, len(keep))
	for i, m := range keep {
		ids[i] = m.ID
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	b := &pgx.Batch{}
	// The settings first: a change under way is waited for before any
	// message is locked.
	var settings lifecycle.Settings
	commands.QueueSharedSettings(b, &settings)
	lock := projection.Lock(b, ids, []uuid.UUID{})
	var version int
	journal.QueueStreamVersion(b, journal.RetentionStream, &version)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, false, fmt.Errorf("lock the batch: %w", err)
	}
	if !settings.Retention.Equal(rs) {
		return 0, false, errSettingsChanged
	}
	now := journal.StoredTime(r.cfg.Now())
	byID := map[uuid.UUID]*projection.Message{}
	for _, m := range keep {
		byID[m.ID] = m
	}
	// The lock takes along the messages first waiting in the lanes of the
	// ones named, as the commands' locks do; those stay. A message locked
	// at the version read is as it was read, so only the versions need
	// comparing.
	locked := slices.DeleteFunc(lock(), func(l projection.Locked) bool { return byID[l.ID] == nil })
	if len(locked) != len(keep) {
		return 0, false, nil
	}
	for _, l := range locked {
		if was := byID[l.ID]; was.Version != l.Version || !rs.RemovalDue(was.Status, was.UpdatedAt, now) {
			return 0, false, nil
		}
	}
	b = &pgx.Batch{}
	err = journal.Queue(b, journal.Event{RecordedAt: now, Stream: journal.RetentionStream, Version: version + 1,
		Actor: journal.ActorRetention, Payload: record})
	if err != nil {
		return 0, false, err
	}
	journal.QueueRemoval(b, streamsOf(ids), records)
	projection.QueueRemove(b, keep, archived)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, false, fmt.Errorf("remove the batch: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("remove the batch: %w: %w", errCommitUnknown, err)
	}
	return version + 1, true, nil
}

// unpinned keeps of ms, messages due for removal, those nothing pins: a
// message whose outcome callback is still to be made (queued, delivering,
// retrying) stays until the call is done, and one with a delivery in a
// lane that is open (a head, or deliveries waiting) stays until the lane
// empties. A lane's history is folded from its first event since it last
// emptied, so removing a message of a lane still open would cut it; the
// version check of the commit keeps a removed delivery from joining a
// lane again meanwhile.
func (r *Retention) unpinned(ctx context.Context, q journal.Querier, ms []*projection.Message) ([]*projection.Message, error) {
	ms = slices.DeleteFunc(ms, func(m *projection.Message) bool { return m.Callback != nil && !m.Callback.State.Final() })
	var lanes []projection.LaneID
	for _, m := range ms {
		lanes = append(lanes, m.Lanes()...)
	}
	open, err := projection.OpenLanes(ctx, q, lanes)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ms, func(m *projection.Message) bool {
		return slices.ContainsFunc(m.Lanes(), func(l projection.LaneID) bool { return open[l] })
	}), nil
}

func (r *Retention) cutAt(point string) error {
	if r.cut != nil {
		return r.cut(point)
	}
	return nil
}

// feedHorizon is the earliest place of the feed's consumer groups, which
// no removed event may be after: that of every group with a place, and
// the zero mark for a group of groups without a place yet. Nil when there
// is no group at all.
func feedHorizon(ctx context.Context, q journal.Querier, groups []string) (*journal.Mark, error) {
	places, err := feed.Places(ctx, q)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if _, ok := places[g]; !ok {
			return &journal.Mark{}, nil
		}
	}
	var horizon *journal.Mark
	for _, m := range places {
		if horizon == nil || after(*horizon, m) {
			horizon = &m
		}
	}
	return horizon, nil
}

// after reports whether a comes after b in the feed's (txid, position)
// order.
func after(a, b journal.Mark) bool {
	return a.TxID > b.TxID || a.TxID == b.TxID && a.Position > b.Position
}

// maxRecords bounds the records of the retention stream one batch takes.
const maxRecords = 1000

// oldRecords reads the events of the retention stream a batch takes along:
// those before the last batch's record, written settled_after ago or more,
// that every feed group has passed.
func (r *Retention) oldRecords(ctx context.Context, q journal.Querier, a *archive, rs lifecycle.Retention,
	horizon *journal.Mark, now time.Time) ([]journal.Event, error) {
	if a.last == nil {
		return nil, nil
	}
	events, marks, err := journal.ReadRecords(ctx, q, a.lastVersion, now.Add(-rs.SettledAfter.D()), maxRecords)
	if err != nil {
		return nil, err
	}
	var out []journal.Event
	for i, e := range events {
		if horizon == nil || !after(marks[i], *horizon) {
			out = append(out, e)
		}
	}
	return out, nil
}
