package projection

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
)

// Held is what a message that holds an idempotency key is compared by
// when the key comes again.
type Held struct {
	ID            uuid.UUID
	From, To      string
	OrderingKey   string
	CallbackURL   string
	PayloadSHA256 string
}

// Held is m's Held. The payload's SHA-256 outlives its expunge.
func (m *Message) Held() Held {
	h := Held{ID: m.ID, From: m.From, To: m.To, OrderingKey: m.OrderingKey, PayloadSHA256: m.PayloadSHA256}
	if m.Callback != nil {
		h.CallbackURL = m.Callback.URL
	}
	return h
}

// heldKeysSQL reads the messages holding source $1's idempotency keys $2.
const heldKeysSQL = `SELECT m.idempotency_key, m.id, m.from_party, m.to_party, coalesce(m.ordering_key, ''),
	coalesce(c.url, ''), m.payload_sha256
	FROM messages m LEFT JOIN callbacks c ON c.message_id = m.id
	WHERE m.source = $1 AND m.idempotency_key = ANY($2)`

// HeldKeys returns, by key, the messages that hold the idempotency keys of
// source already.
func HeldKeys(ctx context.Context, q journal.Querier, source string, keys []string) (map[string]Held, error) {
	rows, err := q.Query(ctx, heldKeysSQL, source, keys)
	held := map[string]Held{}
	if err == nil {
		var (
			key string
			h   Held
		)
		_, err = pgx.ForEachRow(rows, []any{&key, &h.ID, &h.From, &h.To, &h.OrderingKey, &h.CallbackURL, &h.PayloadSHA256},
			func() error { held[key] = h; return nil })
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
