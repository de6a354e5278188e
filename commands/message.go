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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// NewMessage is a message as a source hands it in.
type NewMessage struct {
	Source      string
	From        string
	To          string
	ContentType string
	Payload     []byte
	// IdempotencyKey, when set, makes a repeat of the same key from the same
	// source return the message already held instead of storing another.
	IdempotencyKey string
}

// MatchRoutes is the one routing decision: the distinct targets, in name
// order, of the routes whose source is the message's and whose from and to
// patterns cover its parties (AnyParty covers any name; any other pattern
// only that exact name). Overlapping routes to one target yield it once.
func MatchRoutes(routes []lifecycle.Route, source, from, to string) []string {
	var targets []string
	for _, r := range routes {
		if r.Covers(source, from, to) && !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
	}
	slices.Sort(targets)
	return targets
}

// Ingest stores a message and dispatches it in one transaction, so an
// ingested message never exists undispatched. It returns the message and
// whether it was stored now; false means its idempotency key was seen
// before and the message returned is the one already held.
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
	if in.ContentType == "" {
		in.ContentType = "application/octet-stream"
	}
	sum := sha256.Sum256(in.Payload)
	accepted := &journal.MessageAccepted{
		Source: in.Source, From: in.From, To: in.To, ContentType: in.ContentType,
		PayloadSize: int64(len(in.Payload)), PayloadSHA256: hex.EncodeToString(sum[:]),
		IdempotencyKey: in.IdempotencyKey,
	}
	if err := accepted.Validate(); err != nil {
		return nil, false, invalid(err)
	}
	var cfg *configState
	if dispatch {
		var err error
		if cfg, err = w.config(ctx); err != nil {
			return nil, false, err
		}
	}
	id := uuid.Must(uuid.NewV7())
	m, err := w.run(ctx, subject{}, func(_ *projection.Message, now time.Time) (*change, error) {
		c := newChange(nil)
		c.body = in.Payload
		if c.body == nil {
			c.body = []byte{} // NULL would be no body
		}
		err := c.record(journal.Event{RecordedAt: now, Stream: journal.MessageStream(id),
			Actor: journal.SourceActor(in.Source), Payload: accepted})
		if err != nil {
			return nil, err
		}
		if dispatch {
			if err := w.dispatchOn(c, cfg, now, journal.SourceActor(in.Source), false); err != nil {
				return nil, err
			}
		}
		return c, nil
	})
	if isIdempotencyConflict(err) {
		held, err := w.heldMessage(ctx, in.Source, in.IdempotencyKey)
		return held, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return m, true, nil
}

func isIdempotencyConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "messages_idempotency_key"
}

func (w *Writer) heldMessage(ctx context.Context, source, key string) (*projection.Message, error) {
	var id uuid.UUID
	err := w.db.QueryRow(ctx, `SELECT id FROM messages WHERE source = $1 AND idempotency_key = $2`, source, key).Scan(&id)
	if err != nil {
		return nil, fmt.Errorf("read message held for idempotency key %q: %w", key, err)
	}
	return projection.Load(ctx, w.db, id)
}

// dispatchOn matches the routes for c's message and records the deliveries
// of the targets that have none yet: a dispatch, or a redispatch.
func (w *Writer) dispatchOn(c *change, cfg *configState, now time.Time, actor string, redispatch bool) error {
	m := c.after
	var add []journal.NewDelivery
	for _, target := range MatchRoutes(cfg.routes, m.Source, m.From, m.To) {
		if _, ok := cfg.targets[target]; !ok {
			return fmt.Errorf("%w: a route sends to %q, which is no target", ErrInvalidTarget, target)
		}
		if slices.ContainsFunc(m.Deliveries, func(d projection.Delivery) bool { return d.Target == target }) {
			continue
		}
		add = append(add, journal.NewDelivery{ID: uuid.Must(uuid.NewV7()), Seq: len(m.Deliveries) + len(add) + 1, Target: target})
	}
	nd := journal.NewDeliveries{Deliveries: add}
	if len(add) > 0 {
		nd.NextDue = now.Add(lifecycle.DispatchBackoff(1))
	}
	var p journal.Payload = &journal.MessageDispatched{NewDeliveries: nd}
	if redispatch {
		p = &journal.MessageRedispatched{NewDeliveries: nd}
	}
	if err := c.record(journal.Event{RecordedAt: now, Actor: actor, Payload: p}); err != nil {
		return err
	}
	for _, d := range add {
		c.touched = append(c.touched, d.ID)
		c.wakeups = append(c.wakeups, Wakeup{DeliveryID: d.ID, Target: d.Target})
	}
	return nil
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
	m, err := w.run(ctx, message(id), func(m *projection.Message, now time.Time) (*change, error) {
		if m.Stage != lifecycle.StageAccepted {
			return nil, nil
		}
		c := newChange(m)
		return c, w.dispatchOn(c, cfg, now, actor, false)
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
	m, err := w.run(ctx, message(id), func(m *projection.Message, now time.Time) (*change, error) {
		c := newChange(m)
		return c, refused(ErrNotAccepted, c.record(journal.Event{RecordedAt: now, Actor: actor, Payload: p}))
	})
	if err != nil {
		return nil, fmt.Errorf("refuse message %s: %w", id, err)
	}
	return m, nil
}

// Redispatch matches the current routes again and adds a delivery for each
// matched target that has none. Only a dispatched message can be
// redispatched (ErrNotRedispatchable).
func (w *Writer) Redispatch(ctx context.Context, id uuid.UUID, operator string) (*projection.Message, error) {
	actor := journal.OperatorActor(operator)
	if operator == "" {
		return nil, invalid(&lifecycle.FieldError{Field: "operator", Problem: "is required"})
	}
	cfg, err := w.config(ctx)
	if err != nil {
		return nil, fmt.Errorf("redispatch message %s: %w", id, err)
	}
	m, err := w.run(ctx, message(id), func(m *projection.Message, now time.Time) (*change, error) {
		c := newChange(m)
		return c, refusedToSend(ErrNotRedispatchable, w.dispatchOn(c, cfg, now, actor, true))
	})
	if err != nil {
		return nil, fmt.Errorf("redispatch message %s: %w", id, err)
	}
	return m, nil
}
