package projection

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
)

// HeldKeys reports which of the idempotency keys of source a message
// holds already.
func HeldKeys(ctx context.Context, q journal.Querier, source string, keys []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT idempotency_key FROM messages WHERE source = $1 AND idempotency_key = ANY($2)`, source, keys)
	held := map[string]bool{}
	if err == nil {
		var key string
		_, err = pgx.ForEachRow(rows, []any{&key}, func() error { held[key] = true; return nil })
	}
	if err != nil {
		return nil, fmt.Errorf("read the idempotency keys of source %s held: %w", source, err)
	}
	return held, nil
}

// LoadHeld reads the message that holds source's idempotency key;
// pgx.ErrNoRows, wrapped, when none does.
func LoadHeld(ctx context.Context, q journal.Querier, source, key string) (*Message, error) {
	rows, err := q.Query(ctx, `SELECT id FROM messages WHERE source = $1 AND idempotency_key = $2`, source, key)
	var id uuid.UUID
	if err == nil {
		id, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[uuid.UUID])
	}
	if err != nil {
		return nil, fmt.Errorf("read message held for idempotency key %q: %w", key, err)
	}
	return Load(ctx, q, id)
}

// QueueLatestDuplicates queues on b the read of the latest message of each
// pair of source and duplicate key (sources[i], keys[i]), newest by
// created_at then id; fn is called, when the batch is read, for each pair
// that has one.
func QueueLatestDuplicates(b *pgx.Batch, sources, keys []string, fn func(source, key string, id uuid.UUID)) {
	b.Queue(`SELECT x.s, x.k, m.id FROM unnest($1::text[], $2::text[]) AS x(s, k),
		LATERAL (SELECT id FROM messages WHERE source = x.s AND duplicate_key = x.k
			ORDER BY created_at DESC, id DESC LIMIT 1) m`, sources, keys).Query(func(rows pgx.Rows) error {
		var (
			source, key string
			id          uuid.UUID
		)
		_, err := pgx.ForEachRow(rows, []any{&source, &key, &id}, func() error {
			fn(source, key, id)
			return nil
		})
		return err
	})
}
