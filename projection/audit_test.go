package projection_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type bundle struct {
	ctx context.Context
	db  *pgxpool.Pool
	w   *commands.Writer
	now time.Time
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), now: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	b.db = dbtest.Pool(t)
	var err error
	if b.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: func() time.Time { return b.now }}, DB: b.db}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alpha", "beta"} {
		if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true,
			Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, "operator:admin"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, "operator:admin"); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// lifecycles runs n messages through random but legal lives.
func (b *bundle) lifecycles(t *testing.T, n int, rng *rand.Rand) {
	t.Helper()
	outcomes := []func() lifecycle.Outcome{
		func() lifecycle.Outcome { return lifecycle.Delivered("200 OK") },
		func() lifecycle.Outcome { return lifecycle.Retry(b.now.Add(time.Minute), "503 Service Unavailable") },
		func() lifecycle.Outcome { return lifecycle.Failed("400 Bad Request") },
		func() lifecycle.Outcome { return lifecycle.AwaitingAck("sent", b.now.Add(time.Hour)) },
		func() lifecycle.Outcome {
			// Ids the receivers reuse: a correlation moves to the newest.
			o := lifecycle.AwaitingAck("sent", b.now.Add(time.Hour))
			o.ExternalID = fmt.Sprintf("ext-%d", rng.IntN(8))
			return o
		},
	}
	for i := range n {
		in := commands.NewMessage{Source: "erp", From: "acme", To: "globex",
			Payload: fmt.Appendf(nil, "message %d", i), IdempotencyKey: fmt.Sprint(i)}
		if i%2 == 0 {
			in.CallbackURL = "http://127.0.0.1:9/outcome"
		}
		m, _, err := b.w.Ingest(b.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range m.Deliveries {
			for range rng.IntN(4) {
				b.now = b.now.Add(time.Duration(rng.IntN(120)) * time.Second)
				c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
				if errors.Is(err, commands.ErrNotClaimable) {
					_, _ = b.w.Wake(b.ctx, d.ID)
					_, _ = b.w.TimeoutReceipt(b.ctx, d.ID)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, err := b.w.Complete(b.ctx, d.ID, c.Token, outcomes[rng.IntN(len(outcomes))]()); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(3) == 0 {
				_, _, err := b.w.ReceiptByExternalID(b.ctx, commands.ExternalReceipt{Target: d.Target,
					ExternalID: fmt.Sprintf("ext-%d", rng.IntN(8)), Final: rng.IntN(3) > 0, Positive: rng.IntN(2) == 0,
					Status: "DELIVRD", Code: "000"}, "operator:gateway")
				if err != nil && !errors.Is(err, commands.ErrNotFound) && !errors.Is(err, commands.ErrCorrelationConsumed) &&
					!errors.Is(err, commands.ErrReceiptRefused) {
					t.Fatal(err)
				}
			}
			if rng.IntN(5) == 0 {
				_, err := b.w.Redeliver(b.ctx, m.ID, d.ID, commands.Action{Operator: "admin"})
				if err != nil && !errors.Is(err, commands.ErrNotRedeliverable) {
					t.Fatal(err)
				}
			}
		}
		// The callbacks due, called with outcomes of every kind; some
		// calls never end, and their leases run out.
		claims, err := b.w.ClaimDueCallbacks(b.ctx, 3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			o := outcomes[rng.IntN(3)]()
			if rng.IntN(4) == 0 {
				continue
			}
			if _, err := b.w.CompleteCallback(b.ctx, c.Callback.MessageID, c.Token, o); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (b *bundle) audit(t *testing.T) *projection.Report {
	t.Helper()
	r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// snapshot returns every projection row as text, in a stable order.
func (b *bundle) snapshot(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Query(b.ctx, `SELECT r::text FROM (SELECT * FROM messages ORDER BY id) r
		UNION ALL SELECT r::text FROM (SELECT * FROM deliveries ORDER BY id) r
		UNION ALL SELECT r::text FROM (SELECT * FROM correlations ORDER BY target, external_id) r
		UNION ALL SELECT r::text FROM (SELECT * FROM callbacks ORDER BY message_id) r`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestRebuildEqualsTheTablesBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// By the 225th life this seed has made every succession of events in
	// a message's stream that its first 300 make.
	b.lifecycles(t, 225, rand.New(rand.NewPCG(1, 2)))
	// A refused message, one only accepted and one no route matched, none
	// with an idempotency key.
	refused, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "erp", From: "ä ö", To: "b", Payload: []byte("r")})
	if err == nil {
		_, err = b.w.Refuse(b.ctx, refused.ID, lifecycle.RefusalRejected, "turned down", "operator:admin")
	}
	if err == nil {
		_, _, err = b.w.Accept(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("a")})
	}
	if err == nil {
		_, _, err = b.w.Ingest(b.ctx, commands.NewMessage{Source: "crm", From: "a", To: "b", Payload: []byte("n")})
	}
	if err != nil {
		t.Fatal(err)
	}
	if r := b.audit(t); len(r.Violations) > 0 || r.Messages != 228 {
		t.Fatalf("audit before: %d messages, %v", r.Messages, r.Violations)
	}
	before := b.snapshot(t)
	r, err := projection.Rebuild(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) > 0 {
		t.Fatalf("audit after rebuild: %v", r.Violations)
	}
	after := b.snapshot(t)
	if len(after) != len(before) {
		t.Fatalf("%d rows after, %d before", len(after), len(before))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("row %d:\nbefore %s\nafter  %s", i, before[i], after[i])
		}
	}
}

// TestAuditAndRebuildReadAJournalOfJSONB runs the Writer, the audit and
// the rebuild on a journal whose payload column is jsonb, as an earlier
// build created it: the audit is clean with a claim in flight beside
// retrying, awaiting and settled deliveries, and after the rebuild.
func TestAuditAndRebuildReadAJournalOfJSONB(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Exec(b.ctx, `ALTER TABLE journal ALTER COLUMN payload TYPE jsonb USING payload::jsonb`); err != nil {
		t.Fatal(err)
	}
	b.lifecycles(t, 40, rand.New(rand.NewPCG(3, 4)))
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("in flight")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.audit(t); len(r.Violations) > 0 || r.Messages != 41 {
		t.Fatalf("audit with a claim in flight: %d messages, %v", r.Messages, r.Violations)
	}
	if _, err := b.w.Complete(b.ctx, m.Deliveries[0].ID, c.Token, lifecycle.Delivered("200 OK")); err != nil {
		t.Fatal(err)
	}
	r, err := projection.Rebuild(b.ctx, b.db)
	if err != nil || len(r.Violations) > 0 || r.Messages != 41 {
		t.Fatalf("rebuild: %v, %+v", err, r)
	}
	var column string
	if err := b.db.QueryRow(b.ctx, `SELECT atttypid::regtype::text FROM pg_attribute
		WHERE attrelid = 'journal'::regclass AND attname = 'payload'`).Scan(&column); err != nil || column != "jsonb" {
		t.Fatalf("the payload column is %q (%v), want jsonb still", column, err)
	}
}

func TestRebuildRefusesWhileAServerRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.db.Config().Copy()
	cfg.AfterConnect = schema.ServerAfterConnect
	server, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if err := server.Ping(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := projection.Rebuild(b.ctx, b.db); !errors.Is(err, schema.ErrDatabaseInUse) {
		t.Fatalf("rebuild beside a server: %v", err)
	}
	// As a server stops: its connections give the lock up before they
	// close, so a rebuild run at once finds it free.
	schema.ReleaseServer(b.ctx, server)
	server.Close()
	if _, err := projection.Rebuild(b.ctx, b.db); err != nil {
		t.Fatalf("rebuild after the server stopped: %v", err)
	}
}

func TestAuditNamesACorruptRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 3, rand.New(rand.NewPCG(3, 4)))
	var id uuid.UUID
	if err := b.db.QueryRow(b.ctx, `UPDATE deliveries SET attempts = attempts + 7
		WHERE id = (SELECT id FROM deliveries ORDER BY id LIMIT 1) RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	if len(r.Violations) != 1 || r.Violations[0].DeliveryID != id || !strings.Contains(r.Violations[0].Problem, "Attempts") {
		t.Fatalf("violations %v", r.Violations)
	}
}

func TestAuditNamesAnIllegalEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Deliveries[0]
	// An outcome for a delivery nobody claimed, written behind the commands' back.
	var position int64
	err = b.db.QueryRow(b.ctx, `INSERT INTO journal (recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
		VALUES ($1, $2, $3, $4, $5, 'delivery.attempted', 'worker:alpha', 'queued', 'delivered',
		'{"token":"0194a2b1-0000-7000-8000-000000000001","attempt":1,"outcome":{"kind":"delivered"}}')
		RETURNING position`, b.now, m.ID.String(), m.Version+1, d.ID, d.Target).Scan(&position)
	if err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	if len(r.Violations) != 1 || r.Violations[0].Position != position || r.Violations[0].DeliveryID != d.ID {
		t.Fatalf("violations %v", r.Violations)
	}
}

// TestAuditNamesMissingAndExtraRows checks each kind of row the tables and
// the journal do not share.
func TestAuditNamesMissingAndExtraRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ms []*projection.Message
	for i := range 3 {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: fmt.Appendf(nil, "%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	// Message 0 loses its row; message 1 loses a delivery row and gains a
	// delivery the journal never made; a message row with a delivery appears
	// with no stream behind it, and a delivery row with no message row.
	extraMessage, extraDelivery, orphan, nobody := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	_, err := b.db.Exec(b.ctx, `DELETE FROM messages WHERE id = $1`, ms[0].ID)
	if err == nil {
		_, err = b.db.Exec(b.ctx, `DELETE FROM deliveries WHERE id = $1`, ms[1].Deliveries[0].ID)
	}
	if err == nil {
		_, err = b.db.Exec(b.ctx, `INSERT INTO deliveries (id, message_id, message_created_at, seq, version, target, state,
			attempts, dispatch_count, redeliveries, redelivered_attempts, last_error, created_at, updated_at)
			VALUES ($1, $2, now(), 9, 1, 'gamma', 'queued', 0, 1, 0, 0, '', now(), now()),
			       (gen_random_uuid(), $4, now(), 1, 1, 'alpha', 'queued', 0, 1, 0, 0, '', now(), now()),
			       ($3, $5, now(), 1, 1, 'alpha', 'queued', 0, 1, 0, 0, '', now(), now())`, extraDelivery, ms[1].ID, orphan, extraMessage, nobody)
	}
	if err == nil {
		_, err = b.db.Exec(b.ctx, `INSERT INTO messages SELECT $1, version, source, from_party, to_party, content_type, NULL, NULL, NULL, NULL, NULL, 1,
			payload_size, payload_sha256, stage, refusal, status, error, delivery_count, created_at, updated_at
			FROM messages WHERE id = $2`, extraMessage, ms[2].ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	var got []string
	for _, v := range r.Violations {
		got = append(got, v.String())
	}
	want := []string{
		projection.Violation{MessageID: ms[0].ID, Problem: "in the journal but not in the messages table"}.String(),
		projection.Violation{MessageID: ms[0].ID, DeliveryID: ms[0].Deliveries[0].ID, Problem: "stored delivery of no stored message"}.String(),
		projection.Violation{MessageID: ms[0].ID, DeliveryID: ms[0].Deliveries[1].ID, Problem: "stored delivery of no stored message"}.String(),
		projection.Violation{MessageID: ms[1].ID, DeliveryID: ms[1].Deliveries[0].ID, Problem: "in the journal but not in the deliveries table"}.String(),
		projection.Violation{MessageID: ms[1].ID, DeliveryID: extraDelivery, Problem: "in the deliveries table but not in the journal"}.String(),
		projection.Violation{MessageID: extraMessage, Problem: "in the messages table but not in the journal"}.String(),
		projection.Violation{MessageID: nobody, DeliveryID: orphan, Problem: "stored delivery of no stored message"}.String(),
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Messages != 3 || r.Deliveries != 8 {
		t.Fatalf("%d messages, %d deliveries checked", r.Messages, r.Deliveries)
	}
}

// TestAuditNamesAWrongCountAndRebuildMendsIt checks the kept counts of
// deliveries by state: the commands keep them equal to the rows, the audit
// names a count that is not, and a rebuild writes them anew.
func TestAuditNamesAWrongCountAndRebuildMendsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 40, rand.New(rand.NewPCG(5, 6)))
	counted := func() map[lifecycle.DeliveryState]int64 {
		t.Helper()
		batch := &pgx.Batch{}
		kept := projection.QueueCounts(batch)
		want := map[lifecycle.DeliveryState]int64{}
		for _, s := range lifecycle.CountedStates {
			want[s] = 0
		}
		batch.Queue(`SELECT state, count(*) FROM deliveries WHERE state <> 'superseded' GROUP BY state`).Query(func(rows pgx.Rows) error {
			var (
				state lifecycle.DeliveryState
				n     int64
			)
			_, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error {
				want[state] = n
				return nil
			})
			return err
		})
		if err := b.db.SendBatch(b.ctx, batch).Close(); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(kept(), want) {
			t.Fatalf("kept counts %v, the rows count %v", kept(), want)
		}
		return want
	}
	before := counted()
	if _, err := b.db.Exec(b.ctx, `INSERT INTO delivery_counts VALUES ('nowhere', 9999, 'delivered', 2)`); err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	want := "the count of delivered deliveries to nowhere is 2, the journal makes 0"
	if len(r.Violations) != 1 || r.Violations[0].String() != want {
		t.Fatalf("violations %v, want %q", r.Violations, want)
	}
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %v, %v", r, err)
	}
	if after := counted(); !maps.Equal(after, before) {
		t.Fatalf("counts after rebuild %v, before %v", after, before)
	}
}

// TestAuditNamesAWrongMessageCountAndRebuildMendsIt checks the kept counts
// of messages by status and by status and hour of creation: the commands
// keep them equal to the rows, the audit names a count that is not (a
// status's, an hour's, an hour no message was created in), and a rebuild
// writes them anew.
func TestAuditNamesAWrongMessageCountAndRebuildMendsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lifecycles(t, 40, rand.New(rand.NewPCG(7, 8)))
	lines := func(sql string) []string {
		t.Helper()
		rows, err := b.db.Query(b.ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	counted := func() []string {
		t.Helper()
		kept := append(lines(`SELECT status || ' ' || n FROM (SELECT status, sum(n) n FROM message_counts GROUP BY status) c
				WHERE n <> 0 ORDER BY 1`),
			lines(`SELECT status || ' ' || to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24') || ' ' || n
				FROM (SELECT status, hour, sum(n) n FROM message_hour_counts GROUP BY status, hour) c
				WHERE n <> 0 ORDER BY 1`)...)
		rows := append(lines(`SELECT status || ' ' || count(*) FROM messages GROUP BY status ORDER BY 1`),
			lines(`SELECT s || ' ' || to_char(h AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24') || ' ' || count(*)
				FROM messages, LATERAL (SELECT date_trunc('hour', created_at, 'UTC')) AS h(h),
				LATERAL (VALUES (status), ('')) AS s(s) -- '' counts every status
				GROUP BY s, h ORDER BY 1`)...)
		if !slices.Equal(kept, rows) {
			t.Fatalf("kept counts %v, the rows count %v", kept, rows)
		}
		return kept
	}
	before := counted()
	var (
		delivered, n int64
		status       string
		hour         time.Time
	)
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM messages WHERE status = 'delivered'`).Scan(&delivered); err != nil {
		t.Fatal(err)
	}
	// A status before received: the audit names counts in the order of
	// status and hour.
	if err := b.db.QueryRow(b.ctx, `SELECT status, date_trunc('hour', created_at, 'UTC'), count(*) FROM messages
		WHERE status < 'received' GROUP BY 1, 2 ORDER BY 2, 1 LIMIT 1`).Scan(&status, &hour, &n); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO message_counts VALUES (9999, 'delivered', 2)`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO message_hour_counts
		VALUES ($1, $2, 9999, -1), ('received', '2020-01-01 00:00:00+00', 9999, 1)`, status, hour); err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	want := []string{
		fmt.Sprintf("the count of delivered messages is %d, the journal makes %d", delivered+2, delivered),
		fmt.Sprintf("the count of %s messages created in the hour from %s is %d, the journal makes %d",
			status, hour.UTC().Format(time.RFC3339), n-1, n),
		"the count of received messages created in the hour from 2020-01-01T00:00:00Z is 1, the journal makes 0",
	}
	var got []string
	for _, v := range r.Violations {
		got = append(got, v.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %v, %v", r, err)
	}
	if after := counted(); !slices.Equal(after, before) {
		t.Fatalf("counts after rebuild %v, before %v", after, before)
	}
}

// TestAuditNamesAForgedPossibleDuplicate: a message may name as its
// possible duplicate only an earlier message of its source and key.
func TestAuditNamesAForgedPossibleDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "as2", From: "a", To: "b", Payload: []byte("x"), DuplicateKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if r := b.audit(t); len(r.Violations) != 0 {
		t.Fatalf("violations before: %v", r.Violations)
	}
	var position int64
	err = b.db.QueryRow(b.ctx, `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
		VALUES ($1, $2, 1, 'message.accepted', 'source:erp', jsonb_build_object('source', 'erp', 'from', 'a', 'to', 'b',
			'content_type', 'text/plain', 'payload_size', 1, 'payload_sha256', repeat('0', 64),
			'duplicate_key', 'k', 'possible_duplicate_of', $3::text))
		RETURNING position`, b.now, uuid.New().String(), other.ID.String()).Scan(&position)
	if err != nil {
		t.Fatal(err)
	}
	r := b.audit(t)
	if !slices.ContainsFunc(r.Violations, func(v projection.Violation) bool {
		return v.Position == position && strings.Contains(v.Problem, "possible duplicate of "+other.ID.String())
	}) {
		t.Fatalf("violations %v", r.Violations)
	}
}

// TestAuditNamesATamperedRouting: a redispatch whose recorded routing is
// not what the routes of its config version decide on the message, its
// payload included, is reported by the audit of the whole journal and by
// that of the message alone.
func TestAuditNamesATamperedRouting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "alpha",
		Filter: `message.payload == "big"`}, "operator:admin")
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", ContentType: "text/plain", Payload: []byte("small")})
	if err != nil {
		t.Fatal(err)
	}
	if r := b.audit(t); len(r.Violations) != 0 {
		t.Fatalf("violations before: %v", r.Violations)
	}
	// A redispatch that claims the filtered route took the message, written
	// behind the commands' back.
	var position int64
	err = b.db.QueryRow(b.ctx, `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
		VALUES ($1, $2, $3, 'message.redispatched', 'operator:admin', jsonb_build_object('deliveries', '[]'::jsonb,
			'routes', jsonb_build_array(jsonb_build_object('id', $4::text, 'target', 'alpha', 'filter', $5::text)),
			'config_version', (SELECT max(version) FROM journal WHERE stream = $6)))
		RETURNING position`, b.now, m.ID.String(), m.Version+1, big.ID.String(), big.Filter, journal.ConfigStream).Scan(&position)
	if err != nil {
		t.Fatal(err)
	}
	tampered := func(v projection.Violation) bool {
		return v.Position == position && v.MessageID == m.ID && strings.Contains(v.Problem, "route it by routes")
	}
	for _, message := range []uuid.UUID{uuid.Nil, m.ID} {
		r, err := projection.Audit(b.ctx, b.db, message)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(r.Violations, tampered) {
			t.Errorf("audit of %s: violations %v", message, r.Violations)
		}
	}
}
