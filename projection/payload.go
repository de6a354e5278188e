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
// more than it shows; ErrNotFound when there is none.
func LoadPayload(ctx context.Context, q journal.Querier, id uuid.UUID, limit int) (Payload, error) {
	if limit <= 0 {
		limit = math.MaxInt32
	}
	rows, err := q.Query(ctx, `SELECT m.content_type, substring(p.body FROM 1 FOR $2), octet_length(p.body)
		FROM messages m JOIN payloads p ON p.message_id = m.id WHERE m.id = $1`, id, limit)
	var p Payload
	if err == nil {
		p, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Payload, error) {
			var p Payload
			err := row.Scan(&p.ContentType, &p.Body, &p.Size)
			return p, err
		})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Payload{}, fmt.Errorf("payload of message %s: %w", id, err)
	}
	return p, nil
}
