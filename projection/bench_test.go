package projection_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
)

// journalOf fills the journal with messages × 4 events (accepted, dispatched
// to one target, claimed, delivered), written by SQL for speed; the
// projections stay empty. The messages' and deliveries' ids are of version
// 7, from the message's time, as the Writer makes them.
func journalOf(b *testing.B, messages int) (*bundle, uuid.UUID) {
	b.Helper()
	bd := setup(b)
	_, err := bd.db.Exec(bd.ctx, `
	INSERT INTO journal (recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
	SELECT e.at, g.mid::text, e.version, e.did, e.target, e.kind, e.actor, e.old, e.new, e.payload
	FROM (SELECT i, t0, tok,
			encode(ms || set_byte(substring(r1 FROM 7), 0, (get_byte(r1, 6) & 15) | 112), 'hex')::uuid AS mid,
			encode(ms || set_byte(substring(r2 FROM 7), 0, (get_byte(r2, 6) & 15) | 112), 'hex')::uuid AS did
		FROM (SELECT i, t0, gen_random_uuid() AS tok, uuid_send(gen_random_uuid()) AS r1, uuid_send(gen_random_uuid()) AS r2,
				substring(int8send((extract(epoch FROM t0) * 1000)::bigint) FROM 3) AS ms
			FROM (SELECT i, timestamptz '2026-01-01 00:00:00+00' + i * interval '1 millisecond' AS t0
				FROM generate_series(1, $1) AS i) t) r) g
	CROSS JOIN LATERAL (VALUES
		(1, g.t0, NULL::uuid, NULL, 'message.accepted', 'source:erp', NULL, NULL,
			jsonb_build_object('source', 'erp', 'from', 'acme', 'to', 'globex', 'content_type', 'text/plain',
				'payload_size', 5, 'payload_sha256', repeat('ab', 32))),
		(2, g.t0, NULL, NULL, 'message.dispatched', 'source:erp', NULL, NULL,
			jsonb_build_object('deliveries', jsonb_build_array(jsonb_build_object('id', g.did, 'seq', 1, 'target', 'alpha')),
				'next_due', g.t0 + interval '10 seconds')),
		(3, g.t0 + interval '1 second', g.did, 'alpha', 'delivery.claimed', 'worker:alpha', 'queued', 'delivering',
			jsonb_build_object('token', g.tok, 'attempt', 1, 'lease_end', g.t0 + interval '61 seconds')),
		(4, g.t0 + interval '2 seconds', g.did, 'alpha', 'delivery.attempted', 'worker:alpha', 'delivering', 'delivered',
			jsonb_build_object('token', g.tok, 'attempt', 1, 'outcome', jsonb_build_object('kind', 'delivered', 'text', '200 OK')))
	) AS e(version, at, did, target, kind, actor, old, new, payload)
	ORDER BY g.i, e.version`, messages)
	if err != nil {
		b.Fatal(err)
	}
	var last uuid.UUID
	if err := bd.db.QueryRow(bd.ctx, `SELECT stream::uuid FROM journal ORDER BY position DESC LIMIT 1`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	if _, err := bd.db.Exec(bd.ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return bd, last
}

// benchMessages gives 1,000,000 events.
var benchMessages = 250_000

func BenchmarkHistory(b *testing.B) {
	bd, id := journalOf(b, benchMessages)
	b.ResetTimer()
	for b.Loop() {
		events, err := journal.Stream(bd.ctx, bd.db, journal.MessageStream(id))
		if err != nil || len(events) != 4 {
			b.Fatal(len(events), err)
		}
	}
}

func BenchmarkRebuildAndAudit(b *testing.B) {
	if testing.Short() {
		benchMessages = 25_000
	}
	bd, _ := journalOf(b, benchMessages)
	b.Run("rebuild", func(b *testing.B) {
		for b.Loop() {
			r, err := projection.Rebuild(bd.ctx, bd.db)
			if err != nil || len(r.Violations) > 0 {
				b.Fatal(err, r)
			}
		}
		b.ReportMetric(float64(benchMessages*4*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("audit", func(b *testing.B) {
		// The tables to compare, whether the rebuild ran or not.
		if _, err := projection.Rebuild(bd.ctx, bd.db); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			r, err := projection.Audit(bd.ctx, bd.db, uuid.Nil)
			if err != nil || len(r.Violations) > 0 {
				b.Fatal(err, r)
			}
		}
		b.ReportMetric(float64(benchMessages*4*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
