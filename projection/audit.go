package projection

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// Violation is one disagreement the audit found: an event the fold refuses,
// or a stored row that is not what the journal folds to.
type Violation struct {
	// Position is the event's, for an event the fold refused; 0 for a row.
	Position int64
	// OperationID names the bulk operation, for a violation of one.
	OperationID uuid.UUID
	MessageID   uuid.UUID
	DeliveryID  uuid.UUID
	Problem     string
}

func (v Violation) String() string {
	s := ""
	if v.Position > 0 {
		s = fmt.Sprintf("position %d: ", v.Position)
	}
	if v.OperationID != uuid.Nil {
		s += "operation " + v.OperationID.String() + ": "
	}
	// A violation of the kept counts names no message.
	if v.MessageID != uuid.Nil {
		s += "message " + v.MessageID.String()
		if v.DeliveryID != uuid.Nil {
			s += " delivery " + v.DeliveryID.String()
		}
		s += ": "
	}
	return s + v.Problem
}

// Report is what an audit checked and found.
type Report struct {
	Events     int
	Messages   int
	Deliveries int
	Operations int
	// Removed is what retention took out of the journal, by its record.
	Removed    Removal
	Violations []Violation
}

// Removal is what retention archived and removed, by the totals of its
// last batch's record (retention.archived): what left the journal and why.
// The records of earlier batches leave too, in later batches; those still
// live must follow each other and add up.
type Removal struct {
	// Batches is the number of the last batch, and so of all.
	Batches int64
	journal.RetentionTotal
	// Archive is the archive's id, the name of its directory.
	Archive uuid.UUID
}

// add takes the record of the next batch.
func (r *Removal) add(e journal.Event, p *journal.RetentionArchived) *Violation {
	var problem string
	switch {
	case r.Batches == 0:
	case p.Batch != r.Batches+1:
		problem = fmt.Sprintf("retention batch %d follows batch %d", p.Batch, r.Batches)
	case p.Archive != r.Archive:
		problem = fmt.Sprintf("retention batch %d is of archive %s, the earlier ones of %s", p.Batch, p.Archive, r.Archive)
	case p.Total != r.RetentionTotal.Add(p):
		problem = fmt.Sprintf("the totals of retention batch %d are not those of batch %d and its own", p.Batch, r.Batches)
	}
	r.Batches, r.RetentionTotal, r.Archive = p.Batch, p.Total, p.Archive
	if problem != "" {
		return &Violation{Position: e.Position, Problem: problem}
	}
	return nil
}

// Folded is the state of every message stream the journal holds, and of
// every lane when the whole journal was folded.
type Folded struct {
	Messages map[uuid.UUID]*Message
	// Operations are the bulk operations' states, when the whole journal
	// was folded.
	Operations map[uuid.UUID]*Operation
	Events     int
	Removed    Removal
	Violations []Violation
	// inOrder holds the messages of Messages in the order their streams
	// began, which is the order a rebuild writes them in.
	inOrder []*Message
	// lanes follows every lane, with the ordering of each target as the
	// configuration events left it (ordering); nil for one stream.
	lanes    *LaneBook
	ordering map[string]lifecycle.Ordering
	// disabled holds, by target, the position of the target.disabled that
	// disabled it, until a target.updated enables it again; nil for one
	// stream. No delivery.claimed of the target may come in between.
	disabled map[string]int64
	// inboxes holds what the journal tells of each inbox_table source,
	// earlierRows the rows taken under each name by the inbox_table
	// sources of that name since deleted or made another kind, and
	// Correlations the receivers' ids for messages as the journal makes
	// them; nil for one stream.
	inboxes      map[string]*inboxLedger
	earlierRows  map[string][]int64
	Correlations map[CorrelationKey]Correlation
	// correlatedAt holds, by key, the position of the event that made its
	// correlation, and handedOver each delivery's last hand-over
	// (correlate).
	correlatedAt map[CorrelationKey]int64
	handedOver   map[uuid.UUID]journal.HandOver
	// keys holds the signing keys the journal records of each target
	// that exists; nil for one stream.
	keys map[string]map[string]targets.KeyRecord
	// explained holds what would be violations if retention had removed
	// nothing: a lane's rule broken as removed deliveries explain it, a
	// possible duplicate of a message the journal does not hold. finish
	// reports them when the journal records no removal.
	explained []Violation
	// missingDuplicates are the messages naming as possible duplicate one
	// whose stream had not begun: finish tells a later one from one the
	// journal holds nowhere.
	missingDuplicates []missingDuplicate
	// opsInOrder holds Operations in the order their streams began;
	// trails what the audit follows of each beside the fold (nil for one
	// stream).
	opsInOrder []*Operation
	trails     map[uuid.UUID]*opTrail
	// routes follows the routes to match each dispatch again; nil where
	// routing is not checked (a rebuild).
	routes *routeLedger
	// outcomes holds the outcomes by the minute of every event folded.
	outcomes Tally
	// health holds, by target, the fold of its health stream; nil for one
	// stream. No delivery.claimed of the target may come while its
	// breaker is open.
	health map[string]*TargetHealth
	// shapes holds, by delivery, the shapes the journal records, which
	// delivery_shapes must hold (checkShapes).
	shapes map[uuid.UUID]foldedShape
	// inFlight holds, by target with a max_concurrent, the max_concurrent
	// in force and the lease ends of its claims in flight
	// (lifecycle.InFlightRule); nil for one stream. No delivery.claimed
	// may pass it.
	inFlight map[string]*flight
	// probes holds, by target whose breaker is half-open, the lease end
	// of its probe's claim: no other claim may come before it.
	probes map[string]time.Time
}

// flight is a target's max_concurrent and its claims in flight, by
// delivery, with their lease ends.
type flight struct {
	limit  int
	claims map[uuid.UUID]time.Time
}

// checkInFlight follows the claims in flight of e's target through e,
// which left the delivery in m, and reports a claim that passes the
// target's max_concurrent as it stood at that point of the journal: the
// claims whose lease had not ended and that no outcome, release or
// expiry had ended.
func (f *Folded) checkInFlight(e journal.Event, m *Message) {
	fl := f.inFlight[e.Target]
	d := m.Delivery(e.DeliveryID)
	if fl == nil || d == nil {
		return
	}
	if d.State != lifecycle.StateDelivering {
		delete(fl.claims, d.ID)
		return
	}
	if e.Kind() != journal.KindDeliveryClaimed {
		return
	}
	for id, end := range fl.claims {
		if !lifecycle.InFlightRule.Holds(lifecycle.Facts{State: lifecycle.StateDelivering, LeaseEnd: end}, e.RecordedAt) {
			delete(fl.claims, id)
		}
	}
	fl.claims[d.ID] = d.LeaseEnd
	if len(fl.claims) > fl.limit {
		f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: m.ID, DeliveryID: d.ID,
			Problem: fmt.Sprintf("claimed for target %s with %d attempts in flight, past its max_concurrent %d", e.Target, len(fl.claims), fl.limit)})
	}
}

// checkProbe reports a claim e of message id while its target's breaker
// is half-open, and another claim's lease had not ended: the breaker lets
// one probe through at a time.
func (f *Folded) checkProbe(e journal.Event, id uuid.UUID) {
	p, ok := e.Payload.(*journal.DeliveryClaimed)
	if !ok {
		return
	}
	if end, out := f.probes[e.Target]; out && end.After(e.RecordedAt) {
		f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID,
			Problem: fmt.Sprintf("claimed for target %s while its half-open breaker's probe was out (its lease to %s)", e.Target, stamp(end))})
		return
	}
	f.probes[e.Target] = p.LeaseEnd
}

// limit follows t's max_concurrent, keeping the claims in flight of a
// target that had one; cluster is false for a definition journaled when
// max_concurrent bounded each process.
func (f *Folded) limit(t lifecycle.Target, cluster bool) {
	fl := f.inFlight[t.Name]
	switch {
	case t.MaxConcurrent == 0 || !cluster:
		delete(f.inFlight, t.Name)
	case fl == nil:
		f.inFlight[t.Name] = &flight{limit: t.MaxConcurrent, claims: map[uuid.UUID]time.Time{}}
	default:
		fl.limit = t.MaxConcurrent
	}
}

// missingDuplicate is a possible duplicate of a message the fold did not
// hold when the naming message began.
type missingDuplicate struct {
	violation Violation
	of        uuid.UUID
}

// FoldJournal replays the journal, or one message's stream when message is
// not uuid.Nil, through Apply. An event Apply refuses is reported and
// skipped, so the rest of its stream is still checked. One message's
// routing decisions are matched again as the whole journal's are, against
// the routes the config stream held at each decision's version.
func FoldJournal(ctx context.Context, q journal.Querier, message uuid.UUID) (*Folded, error) {
	if message != uuid.Nil {
		f := &Folded{Messages: map[uuid.UUID]*Message{}, routes: &routeLedger{}}
		config, err := journal.Stream(ctx, q, journal.ConfigStream)
		if err != nil {
			return nil, err
		}
		for _, e := range config {
			f.routes.configure(e)
		}
		events, err := journal.Stream(ctx, q, journal.MessageStream(message))
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			_ = f.fold(e)
		}
		if err := f.checkPayloadRoutes(ctx, q); err != nil {
			return nil, err
		}
		return f, nil
	}
	f := newFolded()
	if err := journal.Scan(ctx, q, 1, f.fold); err != nil {
		return nil, err
	}
	f.finish()
	return f, nil
}

// reading says how Audit and Rebuild read the whole journal: on how many
// connections at once, sharing one snapshot, and how many positions each
// query covers. The tests read in small runs to spread streams over them.
type reading struct {
	connections int
	chunk       int64
	// snapshotTaken, when set, is called once every connection has the
	// snapshot and before anything is read.
	snapshotTaken func()
	// routing matches each dispatch's routes again (the audit's, not the
	// rebuild's).
	routing bool
	// versions, when set, receives the version of each stream's last
	// event, and the fold is left unfinished: an online rebuild folds on
	// from the events committed since.
	versions map[string]int
	// pace, when set, holds the fold to its share of the time.
	pace *pacer
}

var defaultReading = reading{connections: 3, chunk: 8192}

// foldSnapshot replays the whole journal as of the snapshot s, reading on all
// its transactions at once and folding in position order.
func foldSnapshot(ctx context.Context, s *snapshot, rd reading) (*Folded, error) {
	qs := s.queriers()
	last, err := journal.LastPosition(ctx, qs[0])
	if err != nil {
		return nil, err
	}
	f := newFolded()
	if rd.routing {
		f.routes = &routeLedger{}
	}
	fold := f.fold
	if rd.versions != nil {
		fold = func(e journal.Event) error {
			rd.versions[e.Stream] = e.Version
			return f.fold(e)
		}
	}
	if rd.pace != nil {
		unpaced := fold
		fold = func(e journal.Event) error {
			if err := rd.pace.tick(ctx); err != nil {
				return err
			}
			return unpaced(e)
		}
	}
	if err := journal.ScanRanges(ctx, qs, 1, last, rd.chunk, fold); err != nil {
		return nil, err
	}
	if rd.versions == nil {
		f.finish()
	}
	if f.routes != nil {
		if err := f.checkPayloadRoutes(ctx, qs[0]); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// newFolded returns the fold of a whole journal, lanes included.
func newFolded() *Folded {
	f := &Folded{Messages: map[uuid.UUID]*Message{}, ordering: map[string]lifecycle.Ordering{},
		inboxes: map[string]*inboxLedger{}, earlierRows: map[string][]int64{}, Correlations: map[CorrelationKey]Correlation{},
		correlatedAt: map[CorrelationKey]int64{}, handedOver: map[uuid.UUID]journal.HandOver{}, Operations: map[uuid.UUID]*Operation{}, trails: map[uuid.UUID]*opTrail{},
		keys: map[string]map[string]targets.KeyRecord{}, disabled: map[string]int64{}, health: map[string]*TargetHealth{},
		inFlight: map[string]*flight{}, probes: map[string]time.Time{}}
	f.lanes = NewLaneBook(func(target string) lifecycle.Ordering { return f.ordering[target] },
		func(message, delivery uuid.UUID) *Delivery {
			if m := f.Messages[message]; m != nil {
				return m.Delivery(delivery)
			}
			return nil
		}, true)
	return f
}

// finish reports, at the end of the journal, the lanes whose head settled
// without passing the lane on, the operations' acts that do not match
// their counts, and what only a removal explains when the journal records
// none.
func (f *Folded) finish() {
	for _, d := range f.missingDuplicates {
		if f.Messages[d.of] != nil {
			f.Violations = append(f.Violations, d.violation)
		} else {
			f.explained = append(f.explained, d.violation)
		}
	}
	if f.Removed.Batches == 0 {
		f.Violations = append(f.Violations, f.explained...)
	}
	f.finishOperations()
	for _, l := range f.lanes.Stuck() {
		f.Violations = append(f.Violations, Violation{MessageID: l.HeadMessage, DeliveryID: l.Head,
			Problem: fmt.Sprintf("%s: the head settled for the lane, but the %d waiting behind it were not let go", l.LaneID, l.Waiting)})
	}
}

// configure follows a target's ordering, whether a target.disabled holds
// it disabled, and the end of its health with its target.deleted,
// through the configuration events.
func (f *Folded) configure(e journal.Event) {
	switch p := e.Payload.(type) {
	case *journal.TargetCreated:
		f.ordering[p.Target.Name] = p.Target.Ordering.WithDefaults()
		delete(f.disabled, p.Target.Name)
		f.limit(p.Target, p.ClusterLimits)
	case *journal.TargetUpdated:
		f.ordering[p.Target.Name] = p.Target.Ordering.WithDefaults()
		f.limit(p.Target, p.ClusterLimits)
		if p.Target.Enabled {
			delete(f.disabled, p.Target.Name)
		}
	case *journal.TargetDeleted:
		delete(f.ordering, p.Name)
		delete(f.disabled, p.Name)
		delete(f.inFlight, p.Name)
		delete(f.probes, p.Name)
		if h := f.health[p.Name]; h != nil {
			ResetHealth(h)
		}
	case *journal.TargetDisabled:
		f.disabled[p.Target] = e.Position
	}
}

// foldHealth folds an event of target's health stream.
func (f *Folded) foldHealth(target string, e journal.Event) {
	h := f.health[target]
	if h == nil {
		h = &TargetHealth{Target: target, Breaker: lifecycle.HealthClosed}
		f.health[target] = h
	}
	if err := ApplyHealth(h, e); err != nil {
		f.Violations = append(f.Violations, Violation{Position: e.Position, Problem: err.Error()})
	}
	delete(f.probes, target)
}

// fold folds one event; it reports an event Apply refuses and returns nil.
func (f *Folded) fold(e journal.Event) error {
	f.Events++
	switch e.Stream {
	case journal.ConfigStream:
		if f.lanes != nil {
			f.configure(e)
			f.foldSource(e)
			f.foldKey(e)
		}
		if f.routes != nil {
			f.routes.configure(e)
		}
		return nil
	case journal.RetentionStream:
		if p, ok := e.Payload.(*journal.RetentionArchived); ok {
			if v := f.Removed.add(e, p); v != nil {
				f.Violations = append(f.Violations, *v)
			}
		}
		return nil
	}
	if target, ok := journal.TargetOf(e.Stream); ok {
		if f.health != nil {
			f.foldHealth(target, e)
		}
		return nil
	}
	if id, ok := journal.OperationOf(e.Stream); ok {
		if f.Operations != nil {
			f.foldOperation(id, e)
		}
		return nil
	}
	id, err := uuid.Parse(e.Stream)
	if err != nil {
		f.Violations = append(f.Violations, Violation{Position: e.Position, Problem: fmt.Sprintf("stream %q is not a message id", e.Stream)})
		return nil
	}
	m := f.Messages[id]
	if m == nil {
		m = &Message{}
		if err := Apply(m, e); err != nil {
			f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: err.Error()})
			return nil
		}
		f.Messages[id] = m
		f.inOrder = append(f.inOrder, m)
		if f.lanes != nil {
			f.checkDuplicate(m, e)
		}
		f.foldRow(m)
		return nil
	}
	if err := Apply(m, e); err != nil {
		f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: err.Error()})
		return nil
	}
	f.outcomes.addOutcome(&e, m.CreatedAt, 1)
	f.noteActed(id, e)
	f.noteShapes(id, e.Payload)
	if f.routes != nil {
		f.checkRouting(m, e)
	}
	if f.lanes != nil {
		if at, off := f.disabled[e.Target]; off && e.Kind() == journal.KindDeliveryClaimed {
			f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID,
				Problem: fmt.Sprintf("claimed for target %s, which the target.disabled at position %d disabled and no target.updated enabled since", e.Target, at)})
		}
		if h := f.health[e.Target]; h != nil && h.Breaker == lifecycle.HealthOpen && e.Kind() == journal.KindDeliveryClaimed {
			f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID,
				Problem: fmt.Sprintf("claimed for target %s while its breaker was open (since %s)", e.Target, stamp(h.Since))})
		}
		if h := f.health[e.Target]; h != nil && h.Breaker == lifecycle.HealthHalfOpen {
			f.checkProbe(e, id)
		}
		f.checkInFlight(e, m)
		if err := f.lanes.Apply(e, m); err != nil {
			v := Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: err.Error()}
			if explained, _ := explainedOnly(err); explained != nil {
				f.explained = append(f.explained, v)
			} else {
				f.Violations = append(f.Violations, v)
			}
		}
		if problem := correlate(f.Correlations, f.correlatedAt, f.handedOver, e, id); problem != "" {
			f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: problem})
		}
	}
	return nil
}

// checkDuplicate reports a message that names as its possible duplicate a
// message the journal does not hold before it with the same source and
// duplicate key. A message the journal holds nowhere is one retention may
// have removed (the earlier of two settles first): that is reported only
// when the journal records no removal.
func (f *Folded) checkDuplicate(m *Message, e journal.Event) {
	if m.PossibleDuplicateOf == uuid.Nil {
		return
	}
	earlier := f.Messages[m.PossibleDuplicateOf]
	if earlier != nil && earlier != m && earlier.Source == m.Source && earlier.DuplicateKey == m.DuplicateKey {
		return
	}
	v := Violation{Position: e.Position, MessageID: m.ID,
		Problem: fmt.Sprintf("possible duplicate of %s, which is no earlier message of source %q with duplicate key %q",
			m.PossibleDuplicateOf, m.Source, m.DuplicateKey)}
	if earlier == nil {
		f.missingDuplicates = append(f.missingDuplicates, missingDuplicate{violation: v, of: m.PossibleDuplicateOf})
		return
	}
	f.Violations = append(f.Violations, v)
}

// Audit replays the journal (or one message's stream) and checks every
// event against the fold and the fold's result against the stored tables.
// It reads everything in one read-only snapshot, so commands committing
// meanwhile do not show up as differences. The whole journal is read on
// several connections at once, all in that snapshot.
func Audit(ctx context.Context, db *pgxpool.Pool, message uuid.UUID) (*Report, error) {
	return audit(ctx, db, message, defaultReading)
}

func audit(ctx context.Context, db *pgxpool.Pool, message uuid.UUID, rd reading) (*Report, error) {
	var r *Report
	if message != uuid.Nil {
		err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
			func(tx pgx.Tx) error {
				f, err := FoldJournal(ctx, tx, message)
				if err != nil {
					return err
				}
				r, err = checkTables(ctx, []journal.Querier{tx}, f, message)
				return err
			})
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		return r, nil
	}
	s, err := openSnapshot(ctx, db, rd.connections)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer s.close()
	rd.routing = true
	if rd.snapshotTaken != nil {
		rd.snapshotTaken()
	}
	f, err := foldSnapshot(ctx, s, rd)
	if err == nil {
		r, err = checkTables(ctx, s.queriers(), f, uuid.Nil)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return r, nil
}

func scanRows(ctx context.Context, q journal.Querier, sql string, args []any, fn func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Compare lists every field in which the stored state differs from the
// folded one.
func Compare(stored, folded *Message) []Violation {
	out := compareMessage(stored, folded)
	byID := map[uuid.UUID]Delivery{}
	for _, d := range stored.Deliveries {
		byID[d.ID] = d
	}
	for i := range folded.Deliveries {
		want := &folded.Deliveries[i]
		got, ok := byID[want.ID]
		if !ok {
			out = append(out, Violation{MessageID: folded.ID, DeliveryID: want.ID, Problem: "in the journal but not in the deliveries table"})
			continue
		}
		delete(byID, want.ID)
		out = append(out, compareDelivery(folded.ID, &got, want)...)
	}
	for id := range byID {
		out = append(out, Violation{MessageID: folded.ID, DeliveryID: id, Problem: "in the deliveries table but not in the journal"})
	}
	return out
}

// compareMessage lists the fields but the deliveries in which stored
// differs from folded.
func compareMessage(stored, folded *Message) []Violation {
	if sameMessage(stored, folded) {
		return nil
	}
	var out []Violation
	for _, p := range diffFields(*stored, *folded, "Deliveries", "Callback") {
		out = append(out, Violation{MessageID: folded.ID, Problem: p})
	}
	return out
}

func compareDelivery(message uuid.UUID, stored, folded *Delivery) []Violation {
	if sameDelivery(stored, folded) {
		return nil
	}
	var out []Violation
	for _, p := range diffFields(*stored, *folded) {
		out = append(out, Violation{MessageID: message, DeliveryID: folded.ID, Problem: p})
	}
	return out
}

// sameMessage is diffFields(a, b, "Deliveries", "Callback") finding
// nothing, without reflection: the audit asks it of every row.
// TestSameFieldsCoverEveryField keeps it in step with Message. The
// callback is compared apart, with its own row.
func sameMessage(a, b *Message) bool {
	return a.ID == b.ID && a.Version == b.Version && a.RowVersion == b.RowVersion && a.Source == b.Source && a.From == b.From &&
		a.To == b.To && a.ContentType == b.ContentType && a.IdempotencyKey == b.IdempotencyKey &&
		a.OrderingKey == b.OrderingKey && a.DuplicateKey == b.DuplicateKey &&
		a.PossibleDuplicateOf == b.PossibleDuplicateOf && a.Type == b.Type && a.Generation == b.Generation &&
		a.PayloadSize == b.PayloadSize && a.PayloadSHA256 == b.PayloadSHA256 && a.Stage == b.Stage &&
		a.Refusal == b.Refusal && a.Status == b.Status && a.Error == b.Error &&
		a.AttemptCount == b.AttemptCount && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.RowUpdatedAt.Equal(b.RowUpdatedAt) &&
		a.PayloadExpunged == b.PayloadExpunged && a.Trace == b.Trace && maps.Equal(a.Headers, b.Headers)
}

// sameDelivery is diffFields(a, b) finding nothing, without reflection.
func sameDelivery(a, b *Delivery) bool {
	return a.ID == b.ID && a.MessageID == b.MessageID && a.MessageCreatedAt.Equal(b.MessageCreatedAt) &&
		a.Seq == b.Seq && a.Version == b.Version && a.Generation == b.Generation && a.Target == b.Target && a.LaneKey == b.LaneKey && a.LaneSeq == b.LaneSeq &&
		a.LaneContinue == b.LaneContinue &&
		a.State == b.State && a.Attempts == b.Attempts &&
		a.DispatchCount == b.DispatchCount && a.Redeliveries == b.Redeliveries &&
		a.RedeliveredAt.Equal(b.RedeliveredAt) && a.RedeliveredAttempts == b.RedeliveredAttempts &&
		a.NextDue.Equal(b.NextDue) && a.ClaimToken == b.ClaimToken && a.LeaseEnd.Equal(b.LeaseEnd) && a.LastError == b.LastError && a.CreatedAt.Equal(b.CreatedAt) &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.FinishedAt.Equal(b.FinishedAt) && a.Shaped == b.Shaped
}

var timeType = reflect.TypeFor[time.Time]()

// diffFields compares two structs of one type field by field, times by
// instant, skipping the named fields.
func diffFields(stored, folded any, skip ...string) []string {
	a, b := reflect.ValueOf(stored), reflect.ValueOf(folded)
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if slices.Contains(skip, f.Name) {
			continue
		}
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		same := reflect.DeepEqual(x, y)
		if f.Type == timeType {
			same = x.(time.Time).Equal(y.(time.Time))
		}
		if !same {
			out = append(out, fmt.Sprintf("%s is %v in the table, %v by the journal", f.Name, x, y))
		}
	}
	return out
}
