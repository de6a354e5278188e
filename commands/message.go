package commands

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
	"github.com/waybill/waybill/sources"
)

// NewMessage is a message as a source hands it in.
type NewMessage struct {
	Source      string
	From        string
	To          string
	ContentType string
	Payload     []byte
	// IdempotencyKey, when set, makes a repeat of the same key from the same
	// source return the message already held instead of storing another;
	// a repeat whose message differs is an *IdempotencyConflictError.
	IdempotencyKey string
	// OrderingKey, when set, puts the message's deliveries to fifo targets
	// in the lanes of that key: each is attempted after the deliveries
	// dispatched to its lane before it have settled.
	OrderingKey string
	// DuplicateKey, when set, is the sender's own identity of the message
	// (a control id): an earlier message of the source with the same key
	// makes this one a possible duplicate of the latest such. It is stored
	// and delivered all the same; a sender may mean to send twice.
	DuplicateKey string
	// CallbackURL, when set, is called with the message's outcome each
	// time it settles: an absolute http or https URL.
	CallbackURL string
	// Type, when set, is what the message is in the sender's words, such
	// as a webhook's event type (lifecycle.CheckMessageType).
	Type string
	// DeliverAt or Delay, when one is set, schedules the message: its
	// deliveries are made at ingest but first due then
	// (lifecycle.Schedule). Only Ingest and IngestMany schedule.
	DeliverAt time.Time
	Delay     *lifecycle.Duration
	// Headers are the message's headers, names in any case: they are kept
	// lower case (lifecycle.LowerHeaders).
	Headers map[string]string
	// Trace is the trace context the message belongs to: its ingest's
	// span, or what its sender brought when tracing is off.
	Trace lifecycle.Trace
	// Row, when set, is the inbox row the message was read from: the
	// transaction that stores the message records that the row's processed
	// marker is owed.
	Row *InboxRow
}

// InboxRow names a row of an inbox_table source's table.
type InboxRow struct {
	Source string
	ID     int64
}

// Ingest stores a message and dispatches it in one transaction, so an
// ingested message never exists undispatched; in the same transaction it
// claims the deliveries whose workers have a slot free (SetTaker). It
// returns the message and whether it was stored now; false means its
// idempotency key was seen before and the message returned is the one
// already held.
func (w *Writer) Ingest(ctx context.Context, in NewMessage) (*projection.Message, bool, error) {
	m, created, err := w.accept(ctx, in, true)
	if err != nil {
		return nil, false, fmt.Errorf("ingest: %w", err)
	}
	return m, created, nil
}

// Accept stores a message without dispatching it, for sources that must
// hold it before they can read it; Dispatch or Refuse settles its intake.
func (w *Writer) Accept(ctx context.Context, in NewMessage) (*projection.Message, bool, error) {
	m, created, err := w.accept(ctx, in, false)
	if err != nil {
		return nil, false, fmt.Errorf("accept: %w", err)
	}
	return m, created, nil
}

func (w *Writer) accept(ctx context.Context, in NewMessage, dispatch bool) (*projection.Message, bool, error) {
	var cfg *configState
	if dispatch {
		var err error
		if cfg, err = w.config(ctx); err != nil {
			return nil, false, err
		}
	}
	o, err := w.acceptance(ctx, in, cfg)
	if err != nil {
		return nil, false, err
	}
	m, err := w.runOp(o)
	if err != nil {
		ms, errs := w.storedAnyway(ctx, []*op{o})
		m, err = ms[0], errs[0]
	}
	return w.held(ctx, in, m, err)
}

// storedAnyway finds the messages ingest ops stored when their
// transaction failed, for a reason that can pass, once its commit was sent:
// the commit may have gone through with its answer lost, and a message
// told "not stored" is sent again. The ops are those of one batch, looked
// for at once. For each op it returns the message as stored, whose queued
// deliveries it wakes, as the commit's answer would have; or the op's
// error when the message is not there, or surely was not stored;
// ErrMaybeStored when it cannot look. A commit that the server carries out
// only after the look is not found by it.
func (w *Writer) storedAnyway(ctx context.Context, ops []*op) ([]*projection.Message, []error) {
	ms, errs := make([]*projection.Message, len(ops)), make([]error, len(ops))
	var ids []uuid.UUID
	for i, o := range ops {
		errs[i] = o.err
		var sent *sentError
		if Transient(o.err) && errors.As(o.err, &sent) && o.made != uuid.Nil {
			ids = append(ids, o.made)
		}
	}
	if len(ids) == 0 {
		return ms, errs
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	found, err := projection.LoadMany(ctx, w.db, ids)
	byID := map[uuid.UUID]*projection.Message{}
	for _, m := range found {
		byID[m.ID] = m
	}
	for i, o := range ops {
		switch m := byID[o.made]; {
		case !slices.Contains(ids, o.made):
		case m != nil:
			w.log.Warn("message stored, its commit's answer lost", "message_id", m.ID, "err", o.err)
			ms[i], errs[i] = m, nil
			w.wakeQueued(m)
		case err != nil:
			errs[i] = fmt.Errorf("%w: %w", ErrMaybeStored, errors.Join(o.err, err))
		}
	}
	return ms, errs
}

// wakeQueued publishes the wake-ups of m's queued deliveries.
func (w *Writer) wakeQueued(m *projection.Message) {
	var wakeups []Wakeup
	for _, d := range m.Deliveries {
		if d.State == lifecycle.StateQueued {
			wakeups = append(wakeups, Wakeup{DeliveryID: d.ID, Target: d.Target})
		}
	}
	if len(wakeups) > 0 && w.notifier != nil {
		w.notifier.Notify(wakeups)
	}
}

// acceptance checks a new message and returns the op that stores it and,
// with the configuration cfg, dispatches it.
func (w *Writer) acceptance(ctx context.Context, in NewMessage, cfg *configState) (*op, error) {
	if in.ContentType == "" {
		in.ContentType = "application/octet-stream"
	}
	due, err := lifecycle.Schedule(in.DeliverAt, in.Delay, w.now())
	if err != nil {
		return nil, invalid(err)
	}
	headers, err := lifecycle.LowerHeaders("headers", in.Headers)
	if err != nil {
		return nil, invalid(err)
	}
	sum := sha256.Sum256(in.Payload)
	accepted := &journal.MessageAccepted{DeliverAt: due, Headers: headers,
		Source: in.Source, From: in.From, To: in.To, ContentType: in.ContentType,
		PayloadSize: int64(len(in.Payload)), PayloadSHA256: hex.EncodeToString(sum[:]),
		IdempotencyKey: in.IdempotencyKey, OrderingKey: in.OrderingKey, DuplicateKey: in.DuplicateKey,
		CallbackURL: in.CallbackURL, Type: in.Type, TraceParent: in.Trace.Parent, TraceState: in.Trace.State, Baggage: in.Trace.Baggage,
	}
	if err := accepted.ValidateNew(); err != nil {
		return nil, invalid(err)
	}
	o := &op{ctx: ctx, handOff: cfg != nil}
	if in.DuplicateKey != "" {
		o.dup = &dupLookup{dupKey: dupKey{in.Source, in.DuplicateKey}}
	}
	o.decide = func(_ *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		// The id is made as the batch decides, so the messages of one
		// batch, which share their created_at, sort by id in the order
		// they were decided: the latest earlier message of a duplicate
		// key is the one decided before.
		id := uuid.Must(uuid.NewV7())
		o.made = id
		c := newChange(nil)
		c.body = in.Payload
		if c.body == nil {
			c.body = []byte{} // NULL would be no body
		}
		p := *accepted
		if o.dup != nil {
			p.PossibleDuplicateOf = o.dup.latest
		}
		err := c.record(journal.Event{RecordedAt: now, Stream: journal.MessageStream(id),
			Actor: journal.SourceActor(in.Source), Payload: &p})
		if err != nil {
			return nil, err
		}
		if row := in.Row; row != nil {
			c.also(func(b *pgx.Batch) { sources.QueueMarkerOwed(b, row.Source, row.ID, id, now) })
		}
		if cfg != nil {
			if err := w.dispatchOn(c, cfg, c.body, lanes, now, journal.SourceActor(in.Source), false, uuid.Nil, due); err != nil {
				return nil, err
			}
		}
		return c, nil
	}
	return o, nil
}

// held turns the result of storing in into Ingest's: on a repeated
// idempotency key, the message already held, or its Conflict with in.
func (w *Writer) held(ctx context.Context, in NewMessage, m *projection.Message, err error) (*projection.Message, bool, error) {
	if isIdempotencyConflict(err) {
		held, err := projection.LoadHeld(ctx, w.db, in.Source, in.IdempotencyKey)
		if err != nil {
			return nil, false, err
		}
		if err := Conflict(in, held.Held()); err != nil {
			return nil, false, err
		}
		return held, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m, true, nil
}

// Conflict is nil when in repeats held, the message that holds in's
// idempotency key: the same payload (by its SHA-256, which outlives an
// expunge), parties, ordering key and callback URL. Otherwise it is an
// *IdempotencyConflictError naming the fields that differ. The content
// type is not compared, since the same bytes sent as text or as base64
// default to different ones, nor the duplicate key, which only marks
// possible duplicates.
func Conflict(in NewMessage, held projection.Held) error {
	sum := sha256.Sum256(in.Payload)
	var fields []string
	for _, f := range []struct {
		name      string
		got, want string
	}{
		{"payload", hex.EncodeToString(sum[:]), held.PayloadSHA256},
		{"from", in.From, held.From},
		{"to", in.To, held.To},
		{"ordering_key", in.OrderingKey, held.OrderingKey},
		{"callback_url", in.CallbackURL, held.CallbackURL},
	} {
		if f.got != f.want {
			fields = append(fields, f.name)
		}
	}
	if len(fields) == 0 {
		return nil
	}
	return &IdempotencyConflictError{Source: in.Source, Key: in.IdempotencyKey, Fields: fields}
}

// Ingested is the result of one message of IngestMany.
type Ingested struct {
	Message *projection.Message
	// Created is false for a message whose idempotency key was held: the
	// message is the one held.
	Created bool
	// Err is the message's failure: an *IdempotencyConflictError for a
	// held key whose message differs, as Ingest's.
	Err error
}

// maxIngestBytes bounds the payloads one transaction of IngestMany stores.
const maxIngestBytes = 32 << 20

// IngestMany ingests the messages in their order: each is stored and
// dispatched as Ingest would, in transactions of up to 64 of them (and
// 32 MiB of payloads), so that they are created, and routed, in the order
// given. Each has its own result; one that fails leaves the others.
func (w *Writer) IngestMany(ctx context.Context, ins []NewMessage) []Ingested {
	out := make([]Ingested, len(ins))
	cfg, err := w.config(ctx)
	if err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("ingest: %w", err)
		}
		return out
	}
	for start := 0; start < len(ins); {
		var ops []*op
		var index []int
		size := 0
		end := start
		for ; end < len(ins) && len(ops) < maxBatch && (len(ops) == 0 || size+len(ins[end].Payload) <= maxIngestBytes); end++ {
			o, err := w.acceptance(ctx, ins[end], cfg)
			if err != nil {
				out[end].Err = fmt.Errorf("ingest: %w", err)
				continue
			}
			size += len(ins[end].Payload)
			ops = append(ops, o)
			index = append(index, end)
		}
		if len(ops) > 0 {
			w.runBatch(ops)
		}
		lost, lostErrs := w.storedAnyway(ctx, ops)
		for k, o := range ops {
			i := index[k]
			w.handOver(o)
			m, err := lost[k], lostErrs[k]
			if o.err == nil {
				m = o.c.after
				w.committed(o.c)
			}
			m, created, err := w.held(ctx, ins[i], m, err)
			if err != nil {
				err = fmt.Errorf("ingest: %w", err)
			}
			out[i] = Ingested{Message: m, Created: created, Err: err}
		}
		start = end
	}
	return out
}

// isIdempotencyConflict says whether err is a message's insert refused
// because its source's idempotency key is held. messages_idempotency_key
// is the constraint a server of an earlier build adds again when it
// starts, beside this build's index.
func isIdempotencyConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" &&
		(pgErr.ConstraintName == "messages_source_idempotency_key" || pgErr.ConstraintName == "messages_idempotency_key")
}

// dispatchOn matches the routes for c's message, whose body is payload
// (nil when no filter reads it, routingPayloads), and records the
// deliveries of the targets that have none in its current generation, each
// in its lane when the target keeps order and the message has a key: a
// dispatch, or a redispatch (for op, when a bulk operation does it). When
// due is after now, the deliveries are scheduled until then.
func (w *Writer) dispatchOn(c *change, cfg *configState, payload []byte, lanes *projection.LaneBook, now time.Time, actor string,
	redispatch bool, op uuid.UUID, due time.Time) error {
	m := c.after
	d, err := routed(m, cfg, payload)
	if err != nil {
		return err
	}
	targets := slices.DeleteFunc(d.Targets, func(target string) bool {
		return slices.ContainsFunc(m.Deliveries, func(d projection.Delivery) bool { return d.Target == target && m.Current(&d) })
	})
	nd, shapes, err := newDeliveries(m, targets, lanes, now, due, shaper(cfg, m, payload))
	if err != nil {
		return err
	}
	nd.Routing = d.Routing
	var p journal.Payload = &journal.MessageDispatched{NewDeliveries: nd}
	if redispatch {
		p = &journal.MessageRedispatched{NewDeliveries: nd, Operation: op}
	}
	if err := c.record(journal.Event{RecordedAt: now, Actor: actor, Payload: p}); err != nil {
		return err
	}
	c.added(nd, shapes)
	return nil
}

// routed is where the routes send the message, whose body is payload, each
// target of which must exist; the decision names the configuration's
// version.
func routed(m *projection.Message, cfg *configState, payload []byte) (routing.Decision, error) {
	d := cfg.table.Match(RoutingMessage(m, payload))
	d.ConfigVersion = int64(cfg.version)
	for _, target := range d.Targets {
		if _, ok := cfg.targets[target]; !ok {
			return routing.Decision{}, fmt.Errorf("%w: a route sends to %q, which is no target", ErrInvalidTarget, target)
		}
	}
	return d, nil
}

// RoutingMessage is m, with its body payload, as the routes see it.
func RoutingMessage(m *projection.Message, payload []byte) routing.Message {
	return routing.Message{Source: m.Source, From: m.From, To: m.To, Type: m.Type, Headers: m.Headers,
		ContentType: m.ContentType, Size: m.PayloadSize, Payload: payload}
}

// routingPayloads reads the bodies of the messages ids for a decision
// that routes them again or makes deliveries of them, when a filter or a
// transform may read them; nil when none does.
func (w *Writer) routingPayloads(ctx context.Context, cfg *configState, ids ...uuid.UUID) (map[uuid.UUID][]byte, error) {
	if !cfg.table.ReadsPayload() && !cfg.transforms.ReadsPayload() {
		return nil, nil
	}
	b := &pgx.Batch{}
	bodies := projection.QueuePayloads(b, ids)
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read payloads to route: %w", err)
	}
	return bodies, nil
}

// newDeliveries makes a delivery of m to each target, numbered on, each
// placed in its lane, due for its first wake-up by the dispatch back-off,
// or scheduled until due when that is after now; each shaped by its
// target's transform (shape), which may settle it as it is made: such a
// delivery takes no place in a lane. It returns the shapes by delivery.
func newDeliveries(m *projection.Message, targets []string, lanes *projection.LaneBook, now, due time.Time,
	shape func(target string) *routing.Shaped) (journal.NewDeliveries, map[uuid.UUID]routing.Shaped, error) {
	var add []journal.NewDelivery
	var shapes map[uuid.UUID]routing.Shaped
	for _, target := range targets {
		d := journal.NewDelivery{ID: uuid.Must(uuid.NewV7()), Seq: len(m.Deliveries) + len(add) + 1, Target: target}
		s := shape(target)
		if s != nil {
			d.Shape = &s.Shape
			if shapes == nil {
				shapes = map[uuid.UUID]routing.Shaped{}
			}
			shapes[d.ID] = *s
		}
		if !d.Shape.Settled() {
			place, err := lanes.Place(target, m.OrderingKey)
			if err != nil {
				return journal.NewDeliveries{}, nil, err
			}
			d.Lane = place
		}
		add = append(add, d)
	}
	nd := journal.NewDeliveries{Deliveries: add}
	switch {
	case len(add) == 0:
	case due.After(now):
		nd.NextDue, nd.Scheduled = due, true
	default:
		nd.NextDue = now.Add(lifecycle.DispatchBackoff(1))
	}
	return nd, shapes, nil
}

// shaper is the transforms of cfg run on m, whose body is payload (nil
// when none reads it, routingPayloads): the payload is parsed once, for
// the first transform that reads it.
func shaper(cfg *configState, m *projection.Message, payload []byte) func(target string) *routing.Shaped {
	rm := RoutingMessage(m, payload)
	var in *routing.Input
	return func(target string) *routing.Shaped {
		if cfg.transforms[target] == nil {
			return nil
		}
		if in == nil {
			in = routing.NewInput(rm)
		}
		return cfg.transforms.Shape(target, rm, in, cfg.maxPayload)
	}
}

// added notes the new deliveries a recorded event made, with their
// shapes: their rows are written, the shapes beside them, and those
// neither blocked, scheduled nor settled are woken after the commit.
func (c *change) added(nd journal.NewDeliveries, shapes map[uuid.UUID]routing.Shaped) {
	for _, d := range nd.Deliveries {
		c.touched = append(c.touched, d.ID)
		if !d.Blocked && !nd.Scheduled && !d.Shape.Settled() {
			c.wakeups = append(c.wakeups, Wakeup{DeliveryID: d.ID, Target: d.Target})
		}
	}
	if len(shapes) == 0 {
		return
	}
	c.shapes = shapes
	id := c.after.ID
	var ids []uuid.UUID
	var rows []routing.Shaped
	for _, d := range nd.Deliveries {
		if s, ok := shapes[d.ID]; ok {
			ids, rows = append(ids, d.ID), append(rows, s)
		}
	}
	c.also(func(b *pgx.Batch) { projection.QueueInsertShapes(b, id, ids, rows) })
}

// Dispatch routes an accepted message. A message past its intake is
// returned as it is, with nothing changed, so a source may dispatch again
// after a crash without knowing whether the first one committed.
func (w *Writer) Dispatch(ctx context.Context, id uuid.UUID, actor string) (*projection.Message, error) {
	if err := journal.CheckActor(actor); err != nil {
		return nil, invalid(err)
	}
	// The configuration is read before the message row is locked, so a
	// command never waits for a second connection while it holds one.
	cfg, err := w.config(ctx)
	if err != nil {
		return nil, fmt.Errorf("dispatch message %s: %w", id, err)
	}
	payloads, err := w.routingPayloads(ctx, cfg, id)
	if err != nil {
		return nil, fmt.Errorf("dispatch message %s: %w", id, err)
	}
	m, err := w.run(ctx, message(id), func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error) {
		if m.Stage != lifecycle.StageAccepted {
			return nil, nil
		}
		c := newChange(m)
		return c, w.dispatchOn(c, cfg, payloads[m.ID], lanes, now, actor, false, uuid.Nil, time.Time{})
	})
	if err != nil {
		return nil, fmt.Errorf("dispatch message %s: %w", id, err)
	}
	return m, nil
}

// Refuse settles an accepted message without deliveries. The refusal class
// decides its status: Refused for a message turned down on its merits, Error
// for a failure of ours. Any other stage is ErrNotAccepted.
func (w *Writer) Refuse(ctx context.Context, id uuid.UUID, refusal lifecycle.Refusal, reason, actor string) (*projection.Message, error) {
	p := &journal.MessageRefused{Refusal: refusal, Reason: reason}
	if err := errors.Join(p.Validate(), journal.CheckActor(actor)); err != nil {
		return nil, invalid(err)
	}
	m, err := w.run(ctx, message(id), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		c := newChange(m)
		return c, refused(ErrNotAccepted, c.record(journal.Event{RecordedAt: now, Actor: actor, Payload: p}))
	})
	if err != nil {
		return nil, fmt.Errorf("refuse message %s: %w", id, err)
	}
	return m, nil
}
