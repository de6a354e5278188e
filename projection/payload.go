package projection

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/routing"
)

// Payload is a message's bytes with the content type its source gave.
type Payload struct {
	ContentType string
	// Body is the payload, or its first bytes when the read was bounded.
	Body []byte
	// Size is the whole payload's size in bytes.
	Size int64
}

// LoadPayload reads the payload of a message, only its first limit bytes
// when limit is above 0, so that a preview of a large payload reads no
// more than it shows; ErrNotFound when there is none, and
// ErrPayloadExpunged when retention dropped it.
func LoadPayload(ctx context.Context, q journal.Querier, id uuid.UUID, limit int) (Payload, error) {
	if limit <= 0 {
		limit = math.MaxInt32
	}
	rows, err := q.Query(ctx, `SELECT m.content_type, m.payload_expunged, substring(p.body FROM 1 FOR $2), octet_length(p.body)
		FROM messages m LEFT JOIN payloads p ON p.message_id = m.id WHERE m.id = $1`, id, limit)
	var (
		p        Payload
		expunged bool
		size     *int64
	)
	if err == nil {
		p, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Payload, error) {
			var p Payload
			err := row.Scan(&p.ContentType, &expunged, &p.Body, &size)
			return p, err
		})
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && !expunged && size == nil:
		err = ErrNotFound
	case err == nil && expunged:
		err = fmt.Errorf("%w by retention; the message keeps its size and SHA-256", ErrPayloadExpunged)
	case err == nil:
		p.Size = *size
	}
	if err != nil {
		return Payload{}, fmt.Errorf("payload of message %s: %w", id, err)
	}
	return p, nil
}

// QueueInsertPayloads queues on b the insert of the payloads of new
// messages, bodies[i] the payload of ids[i], as one statement.
func QueueInsertPayloads(b *pgx.Batch, ids []uuid.UUID, bodies [][]byte) {
	b.Queue(`INSERT INTO payloads (message_id, body) SELECT * FROM unnest($1::uuid[], $2::bytea[])`, ids, bodies)
}

// QueueDeletePayloads queues on b the deletion of the payloads of the
// messages, in the transaction that journals why (their expunge, or their
// removal).
func QueueDeletePayloads(b *pgx.Batch, ids []uuid.UUID) {
	b.Queue(`DELETE FROM payloads WHERE message_id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM delivery_shapes WHERE message_id = ANY($1::uuid[])`, ids)
}

// payloadsSQL reads the bodies of the messages $1 that have one.
const payloadsSQL = `SELECT k.id, p.body FROM unnest($1::uuid[]) AS k(id),
	LATERAL (SELECT body FROM payloads WHERE message_id = k.id OFFSET 0) p`

// QueuePayloads queues on b the read of the messages' payloads into the
// map it returns, which is filled when the batch is closed; a message
// without one is not in it. It looks each id up on its own, as Lock does,
// so a generic plan cannot scan the table.
func QueuePayloads(b *pgx.Batch, ids []uuid.UUID) map[uuid.UUID][]byte {
	bodies := make(map[uuid.UUID][]byte, len(ids))
	b.Queue(payloadsSQL, ids).
		Query(func(rows pgx.Rows) error {
			var (
				id   uuid.UUID
				body []byte
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &body}, func() error {
				bodies[id] = body
				return nil
			})
			return err
		})
	return bodies
}

// QueueInsertShapes queues on b the insert of the shapes of the new
// deliveries ids of the message, shapes[i] that of ids[i], in the
// transaction that journals them.
func QueueInsertShapes(b *pgx.Batch, messageID uuid.UUID, ids []uuid.UUID, shapes []routing.Shaped) {
	docs := make([]journal.Shape, len(shapes))
	bodies := make([][]byte, len(shapes))
	for i, s := range shapes {
		docs[i], bodies[i] = s.Shape, s.Body
	}
	b.Queue(`INSERT INTO delivery_shapes (delivery_id, message_id, shape, body)
		SELECT k.id, $1, k.shape, k.body FROM unnest($2::uuid[], $3::jsonb[], $4::bytea[]) AS k(id, shape, body)`,
		messageID, ids, docs, bodies)
}

// QueueShapes queues on b the read of the shapes of the deliveries ids
// (those Shaped) into the map it returns, by delivery id, filled when the
// batch is closed; a delivery without one (its message's payload
// expunged) is not in it. It looks each id up on its own, by the primary
// key, as QueuePayloads does.
func QueueShapes(b *pgx.Batch, ids []uuid.UUID) map[uuid.UUID]routing.Shaped {
	shapes := map[uuid.UUID]routing.Shaped{}
	b.Queue(`SELECT s.delivery_id, s.shape, s.body FROM unnest($1::uuid[]) AS k(id),
		LATERAL (SELECT delivery_id, shape, body FROM delivery_shapes WHERE delivery_id = k.id OFFSET 0) s`, ids).
		Query(func(rows pgx.Rows) error {
			var (
				id uuid.UUID
				s  routing.Shaped
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &s.Shape, &s.Body}, func() error {
				shapes[id] = s
				s = routing.Shaped{}
				return nil
			})
			return err
		})
	return shapes
}
