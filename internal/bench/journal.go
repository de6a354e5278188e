package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Synthetic is a journal of many messages that LoadJournal writes by SQL,
// for the tests and benchmarks at a scale that ingests through the
// commands would take too long to reach. Each message goes from erp to
// the targets archive and billing, which the caller creates.
type Synthetic struct {
	// Messages is how many messages; each has six events, or four.
	Messages int
	// End is the time of the last message; the messages are spread
	// evenly over Span before it.
	End  time.Time
	Span time.Duration
	// Varied gives the journal the variety of a working day: one message
	// in ten comes from crm; billing fails one in a hundred, retries one
	// in two hundred and has not tried one in two hundred; one message in
	// two hundred is a possible duplicate, of the message before it.
	// Without it every delivery is delivered at its first attempt.
	Varied bool
}

// loadChunk is how many messages one statement of LoadJournal writes.
const loadChunk = 100_000

// syntheticSQL writes the events of the messages $1 to $2 of $4, the last
// at $3, each $5 after the one before, varied when $6. The message of
// number i has the id md5('synthetic' || i); the times are whole
// milliseconds, as the journal keeps them.
const syntheticSQL = `
	INSERT INTO journal (recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
	SELECT e.at, g.mid::text, e.version, e.did, e.target, e.kind, e.actor, e.old, e.new, e.payload
	FROM (SELECT i, CASE WHEN $6 THEN i % 200 ELSE -1 END AS k, md5('synthetic' || i)::uuid AS mid,
			gen_random_uuid() AS a, gen_random_uuid() AS b, gen_random_uuid() AS ta, gen_random_uuid() AS tb,
			date_trunc('milliseconds', $3::timestamptz - ($4::bigint - i) * $5::interval) AS t0
		FROM generate_series($1::bigint, $2::bigint) AS i) g
	CROSS JOIN LATERAL (VALUES
		(1, g.t0, NULL::uuid, NULL, 'message.accepted', 'source:erp', NULL, NULL,
			jsonb_build_object('source', CASE WHEN $6 AND g.i % 10 = 0 THEN 'crm' ELSE 'erp' END, 'from', 'acme', 'to', 'globex',
				'content_type', 'application/json', 'payload_size', 17, 'payload_sha256', repeat('ab', 32)) ||
			CASE WHEN g.k = 2 THEN jsonb_build_object('duplicate_key', 'INV-' || (g.i + 1))
				WHEN g.k = 3 THEN jsonb_build_object('duplicate_key', 'INV-' || g.i, 'possible_duplicate_of', md5('synthetic' || (g.i - 1))::uuid)
				ELSE '{}'::jsonb END),
		(2, g.t0, NULL, NULL, 'message.dispatched', 'source:erp', NULL, NULL,
			jsonb_build_object('deliveries', jsonb_build_array(
				jsonb_build_object('id', g.a, 'seq', 1, 'target', 'archive'),
				jsonb_build_object('id', g.b, 'seq', 2, 'target', 'billing')),
				'next_due', g.t0 + interval '10 seconds')),
		(3, g.t0 + interval '1 second', g.a, 'archive', 'delivery.claimed', 'worker:archive', 'queued', 'delivering',
			jsonb_build_object('token', g.ta, 'attempt', 1, 'lease_end', g.t0 + interval '61 seconds')),
		(4, g.t0 + interval '2 seconds', g.a, 'archive', 'delivery.attempted', 'worker:archive', 'delivering', 'delivered',
			jsonb_build_object('token', g.ta, 'attempt', 1, 'outcome', jsonb_build_object('kind', 'delivered', 'text', '200 OK'))),
		(5, g.t0 + interval '1 second', g.b, 'billing', 'delivery.claimed', 'worker:billing', 'queued', 'delivering',
			jsonb_build_object('token', g.tb, 'attempt', 1, 'lease_end', g.t0 + interval '61 seconds')),
		(6, g.t0 + interval '3 seconds', g.b, 'billing', 'delivery.attempted', 'worker:billing', 'delivering',
			CASE WHEN g.k IN (0, 100) THEN 'failed' WHEN g.k = 1 THEN 'retrying' ELSE 'delivered' END,
			jsonb_build_object('token', g.tb, 'attempt', 1, 'outcome', CASE
				WHEN g.k IN (0, 100) THEN jsonb_build_object('kind', 'failed', 'text', '400 Bad Request')
				WHEN g.k = 1 THEN jsonb_build_object('kind', 'retry', 'text', '503 Service Unavailable',
					'retry_at', g.t0 + interval '1 minute')
				ELSE jsonb_build_object('kind', 'delivered', 'text', '200 OK') END))
	) AS e(version, at, did, target, kind, actor, old, new, payload)
	WHERE e.version < 5 OR g.k <> 2
	ORDER BY g.i, e.version`

// syntheticPayloadsSQL gives the messages $1 to $2 their payload.
const syntheticPayloadsSQL = `INSERT INTO payloads (message_id, body)
	SELECT md5('synthetic' || i)::uuid, '{"invoice": 4711}'::bytea FROM generate_series($1::bigint, $2::bigint) AS i`

// LoadJournal writes the events of s's messages straight into the journal
// of db, and their payloads, in statements of loadChunk messages; the
// projections are left to a rebuild. The journal's own order is the
// messages' and their events'.
func LoadJournal(ctx context.Context, db *pgxpool.Pool, s Synthetic) error {
	if s.Messages <= 0 || s.Span <= 0 {
		return errors.New("bench: a synthetic journal needs messages and a span")
	}
	step := s.Span / time.Duration(s.Messages)
	for from := 1; from <= s.Messages; from += loadChunk {
		to := min(from+loadChunk-1, s.Messages)
		if _, err := db.Exec(ctx, syntheticSQL, from, to, s.End, s.Messages, step, s.Varied); err != nil {
			return fmt.Errorf("load messages %d to %d into the journal: %w", from, to, err)
		}
		if _, err := db.Exec(ctx, syntheticPayloadsSQL, from, to); err != nil {
			return fmt.Errorf("load the payloads of messages %d to %d: %w", from, to, err)
		}
	}
	return nil
}
