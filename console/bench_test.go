package console_test

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/bench"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// benchMessages is the size of the benchmark's database; -short makes it
// 20,000.
const benchMessages = 1_000_000

// benchDays is the time the messages are spread over, ending at the
// benchmark's clock: with 30 days, the 24-hour and 7-day figures count
// 1/30 and 7/30 of them; with 7, the 7-day figure counts them all.
var benchDays = flag.Int("waybill.days", 30, "the days BenchmarkPages spreads its messages over, ending at its clock")

// benchPastHour puts the benchmark's clock this far past the hour, so that
// the windows of /stats begin a minute into an hour: the kept counts are
// by hour, and the rest of that hour is counted from the messages.
const benchPastHour = time.Minute

// loadMessages fills the journal by SQL, n messages of 4 to 6 events
// (bench.LoadJournal, varied), and the projections from it with a rebuild,
// as the projection benchmarks do.
func loadMessages(b *testing.B, bd *bundle, n int) {
	b.Helper()
	bd.target(b, "archive")
	bd.target(b, "billing")
	end := bd.clock.Now()
	err := bench.LoadJournal(bd.ctx, bd.db, bench.Synthetic{Messages: n, End: end,
		Span: time.Duration(*benchDays) * 24 * time.Hour, Varied: true})
	if err != nil {
		b.Fatal(err)
	}
	loadLanes(b, bd, n/50)
	r, err := projection.Rebuild(bd.ctx, bd.db)
	if err != nil || len(r.Violations) > 0 {
		b.Fatal(err, r)
	}
	// The rebuild writes each kept count of messages in one row; the
	// projector's writers spread them over the shards. Every status (and
	// "", any status) gets a row in every shard, of every hour loaded: the
	// figures of /stats sum as many rows as they ever can.
	if _, err := bd.db.Exec(bd.ctx, `
		INSERT INTO message_hour_counts (hour, status, shard, n)
		SELECT h, s, sh, 0 FROM generate_series($1::timestamptz, $2::timestamptz, interval '1 hour') h,
			unnest($3::text[]) s, generate_series(0, $4 - 1) sh
		ON CONFLICT DO NOTHING`, end.Add(-time.Duration(*benchDays)*24*time.Hour).Truncate(time.Hour), end,
		append(lifecycle.Strings(lifecycle.MessageStatuses), ""), projection.MessageCountShards); err != nil {
		b.Fatal(err)
	}
	if _, err := bd.db.Exec(bd.ctx, `INSERT INTO message_counts (shard, status, n)
		SELECT sh, s, 0 FROM unnest($1::text[]) s, generate_series(0, $2 - 1) sh ON CONFLICT DO NOTHING`,
		lifecycle.Strings(lifecycle.MessageStatuses), projection.MessageCountShards); err != nil {
		b.Fatal(err)
	}
	// Likewise the outcomes by the minute, as a drain of 48 hours on many
	// connections leaves them once retention has tidied them
	// (projection.TidyMinutes): every minute it keeps, of both targets,
	// delivered in four latency buckets, retried and failed, one row each,
	// and the last two minutes' in every shard.
	if _, err := bd.db.Exec(bd.ctx, `
		INSERT INTO delivery_minute_counts (target, minute, outcome, class, bucket, shard, n)
		SELECT t, m, o.outcome, o.class, o.bucket, sh, 0
		FROM unnest(ARRAY['archive', 'billing']) t,
			generate_series($1::timestamptz, $2::timestamptz, interval '1 minute') m,
			generate_series(0, CASE WHEN m >= $2::timestamptz - interval '1 minute' THEN $3 - 1 ELSE 0 END) sh,
			(VALUES ('delivered', '2xx', 8), ('delivered', '2xx', 9), ('delivered', '2xx', 10), ('delivered', '2xx', 11),
				('retrying', '5xx', -1), ('failed', '4xx', -1)) AS o(outcome, class, bucket)
		ON CONFLICT DO NOTHING`, end.Add(-projection.MinutesKept).Truncate(time.Minute), end.Truncate(time.Minute),
		projection.MessageCountShards); err != nil {
		b.Fatal(err)
	}
	if _, _, err := projection.TidyMinutes(bd.ctx, bd.db, end); err != nil {
		b.Fatal(err)
	}
	if _, err := bd.db.Exec(bd.ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
}

// lanesOf is the number of messages of each ordering key loadLanes loads.
const lanesOf = 4

// loadLanes adds n messages from shop to orders, a fifo target, by SQL into
// the journal, with their payloads, spread as loadMessages spreads its own: lanesOf of each
// ordering key, order-00000 and on, whose first is its lane's head, queued,
// and the others wait blocked behind it.
func loadLanes(b *testing.B, bd *bundle, n int) {
	b.Helper()
	bd.fifo(b, "orders")
	end := bd.clock.Now()
	step := time.Duration(*benchDays) * 24 * time.Hour / time.Duration(n)
	_, err := bd.db.Exec(bd.ctx, `
		INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
		SELECT e.at, g.mid::text, e.version, e.kind, 'source:shop', e.payload
		FROM (SELECT j, gen_random_uuid() AS mid, gen_random_uuid() AS did, j % $4 + 1 AS seq,
				'order-' || lpad((j / $4)::text, 5, '0') AS key,
				$1::timestamptz - ($2::bigint - j) * $3::interval AS t0
			FROM generate_series(0, $2::bigint - 1) AS j) g
		CROSS JOIN LATERAL (VALUES
			(1, g.t0, 'message.accepted', jsonb_build_object('source', 'shop', 'from', 'acme', 'to', 'globex',
				'content_type', 'application/json', 'payload_size', 17, 'payload_sha256', repeat('ab', 32), 'ordering_key', g.key)),
			(2, g.t0, 'message.dispatched', jsonb_build_object('deliveries', jsonb_build_array(
				jsonb_build_object('id', g.did, 'seq', 1, 'target', 'orders', 'lane_seq', g.seq, 'blocked', g.seq > 1)),
				'next_due', g.t0 + interval '10 seconds'))
		) AS e(version, at, kind, payload)
		ORDER BY g.j, e.version`, end, n, step, lanesOf)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bd.db.Exec(bd.ctx, `INSERT INTO payloads (message_id, body)
		SELECT stream::uuid, '{"invoice": 4711}'::bytea FROM journal WHERE kind = 'message.accepted' AND actor = 'source:shop'`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPages builds every page of the console on a database of
// 1,000,000 messages, in the handler: the server's time, from the session's
// check to the last byte, without the network. Each page must take less
// than 50 ms (docs/performance.md).
func BenchmarkPages(b *testing.B) {
	n := benchMessages
	if testing.Short() {
		n = 20_000
	}
	bd := setup(b)
	bd.clock.Advance(time.Duration(*benchDays)*24*time.Hour + benchPastHour)
	loadMessages(b, bd, n)
	now := bd.clock.Now()
	secret, _, err := bd.tokens.StartSession(bd.ctx, bd.admin, now, now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	var failed uuid.UUID
	if err := bd.db.QueryRow(bd.ctx, `SELECT id FROM messages WHERE status = 'error' ORDER BY created_at DESC LIMIT 1`).Scan(&failed); err != nil {
		b.Fatal(err)
	}
	_, next, err := projection.ListMessages(bd.ctx, bd.db, projection.MessageFilter{Limit: 50})
	if err != nil || next == nil {
		b.Fatal(err)
	}
	var blockedMessage, blockedDelivery uuid.UUID
	if err := bd.db.QueryRow(bd.ctx, `SELECT message_id, id FROM deliveries WHERE state = 'blocked' LIMIT 1`).
		Scan(&blockedMessage, &blockedDelivery); err != nil {
		b.Fatal(err)
	}
	lanes, err := projection.ListLanes(bd.ctx, bd.db, "orders", false, "", 50)
	if err != nil || len(lanes) < 50 {
		b.Fatal(err, len(lanes))
	}
	op, err := bd.w.CreateOperation(bd.ctx, commands.OperationSpec{Action: lifecycle.ActionRedeliver,
		Filter: lifecycle.OperationFilter{Status: []lifecycle.MessageStatus{lifecycle.StatusError}}}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	day := now.Add(-24 * time.Hour).UTC().Format("2006-01-02T15:04:05")
	// The dashboard's figures alone: the API's GET /stats reads the same.
	b.Run("stats", func(b *testing.B) {
		for b.Loop() {
			if _, err := projection.ReadStats(bd.ctx, bd.db, now); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
	})
	for _, p := range []struct{ name, path string }{
		{"dashboard", "/ui/"},
		{"messages", "/ui/messages"},
		{"messages/page2", "/ui/messages?cursor=" + next.String()},
		{"messages/status=error", "/ui/messages?status=error"},
		{"messages/source=crm,24h", "/ui/messages?" + url.Values{"source": {"crm"}, "created_after": {day}}.Encode()},
		{"messages/target=billing", "/ui/messages?target=billing"},
		{"messages/ordering_key", "/ui/messages?ordering_key=order-00042"},
		{"messages/possible_duplicate", "/ui/messages?possible_duplicate=true"},
		{"message", "/ui/messages/" + failed.String()},
		{"message/blocked", "/ui/messages/" + blockedMessage.String()},
		{"redispatch", "/ui/messages/" + failed.String() + "/redispatch"},
		{"resend", "/ui/messages/" + failed.String() + "/resend"},
		{"replay", "/ui/messages/" + failed.String() + "/replay"},
		{"skip", "/ui/messages/" + blockedMessage.String() + "/deliveries/" + blockedDelivery.String() + "/skip"},
		{"lanes", "/ui/targets/orders/lanes"},
		{"lanes/page2", "/ui/targets/orders/lanes?cursor=" + projection.LaneCursor(lanes[49].Key)},
		{"lanes/blocked", "/ui/targets/orders/lanes?blocked=true"},
		{"targets", "/ui/targets"},
		{"target", "/ui/targets/billing"},
		{"routes", "/ui/routes"},
		{"settings", "/ui/settings"},
		{"operations", "/ui/operations"},
		{"operation", "/ui/operations/" + op.ID.String()},
		{"operation/new", "/ui/operations/new?filter.status=error"},
		{"operation/new/counted,24h", "/ui/operations/new?" + url.Values{"action": {"redeliver"}, "filter.status": {"error"},
			"filter.created_after": {day}}.Encode()},
	} {
		b.Run(p.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, p.path, nil).WithContext(bd.ctx)
			req.AddCookie(&http.Cookie{Name: "waybill_session", Value: secret})
			for b.Loop() {
				rec := httptest.NewRecorder()
				bd.console.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d\n%s", p.path, rec.Code, rec.Body)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
		})
	}
}
