package projection

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
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
