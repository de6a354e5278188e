package schema_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/schema"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestEnsureIsIdempotentAndChecksVersions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 2 {
		if err := schema.Ensure(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE schema_version SET version = 99 WHERE part = 'projections'`); err != nil {
		t.Fatal(err)
	}
	var ve *schema.VersionError
	if err := schema.Ensure(ctx, db); !errors.As(err, &ve) || ve.Part != schema.PartProjections || ve.Stored != 99 {
		t.Fatalf("Ensure on another version: %v", err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatalf("Ensure after the reset: %v", err)
	}
}

// TestEnsureOnACurrentSchemaWaitsForNoWriter: with this build's schema in
// place, Ensure (a server's start, an audit beside running servers) takes
// no table lock, so a transaction that writes the journal and the
// projections, held open, does not make it wait, nor it them. After a
// reset it runs the DDL again.
func TestEnsureOnACurrentSchemaWaitsForNoWriter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	writer, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	if _, err := writer.Exec(ctx, `LOCK TABLE journal, messages, deliveries, api_tokens, target_keys IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// The writer stays open until the end: an Ensure that waited for it
	// would wait until this deadline, not merely be slow.
	waiting, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := schema.Ensure(waiting, db); err != nil {
		t.Fatalf("Ensure beside a writer: %v", err)
	}
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ('messages', 'deliveries') AND relkind = 'r'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("after a reset Ensure made %d of the 2 tables: %v", n, err)
	}
}

// serverPool opens a pool as a server's, each connection holding the
// server lock shared.
func serverPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = schema.ServerAfterConnect
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// TestServerLockExcludesRebuild: servers share the database, a rebuild
// or a reset takes it alone, and a server that lost every session it had
// (a restart of PostgreSQL, a failover) writes nothing while a rebuild
// holds the database, then goes on once it is done.
func TestServerLockExcludesRebuild(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := dbtest.URL(t)
	tool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()
	a, b := serverPool(t, url), serverPool(t, url)
	for _, db := range []*pgxpool.Pool{a, b} {
		if err := db.Ping(ctx); err != nil {
			t.Fatalf("two servers: %v", err)
		}
	}
	if _, err := schema.LockExclusive(ctx, tool); !errors.Is(err, schema.ErrDatabaseInUse) {
		t.Fatalf("exclusive beside servers: %v", err)
	}
	b.Close()
	// Server a loses its sessions: no connection of a server is open.
	var pids []int32
	if err := tool.QueryRow(ctx, `SELECT array_agg(pid) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND objsubid = 1
		AND classid = ($1::bigint >> 32)::text::oid AND objid = ($1::bigint & x'ffffffff'::bigint)::text::oid`, int64(schema.KeyServer)).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	if _, err := tool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		t.Fatal(err)
	}
	var x *schema.Lock
	testpoll.Until(t, "the database alone once the server's sessions ended", func() bool {
		x, err = schema.LockExclusive(ctx, tool)
		return err == nil
	})
	// Its next sessions cannot open while the rebuild holds the database.
	testpoll.Until(t, "a server's sessions refused while a rebuild holds the database", func() bool {
		_, err := a.Exec(ctx, `SELECT 1`)
		return errors.Is(err, schema.ErrDatabaseInUse)
	})
	x.Release()
	if _, err := a.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("a server once the rebuild is done: %v", err)
	}
}

// TestEnsureRefusesAResetBesideAJournal: once the projections are reset, a
// database whose journal holds an event gets no empty tables from Ensure
// (a server's start, an audit): only a rebuild makes them.
func TestEnsureRefusesAResetBesideAJournal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := dbtest.Pool(t)
	if _, err := db.Exec(ctx, `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
		VALUES (now(), 'config', 1, 'settings.changed', 'operator:admin', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := schema.Ensure(ctx, db); !errors.Is(err, schema.ErrProjectionsReset) || !strings.Contains(err.Error(), "waybill rebuild") {
			t.Fatalf("Ensure after a reset beside a journal: %v", err)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ('messages', 'deliveries') AND relkind = 'r'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("Ensure made %d of the projection tables: %v", n, err)
	}
}

func TestAlertsSurviveAProjectionReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := dbtest.Pool(t)
	if _, err := db.Exec(ctx, `INSERT INTO alerts (id, code, severity, key, position, raised_at, body, webhook)
		VALUES ('a', 'delivery_stalled', 'critical', 'delivery_stalled:alpha', 1, now(), '{}', false)`); err != nil {
		t.Fatal(err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM alerts`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d alerts after the reset, %v", n, err)
	}
}

// legacyProjectionDDL is how builds before the tables and their keys were
// created apart made the projection tables: Ensure must find nothing to add
// to them, and a rebuild must make the same.
const legacyProjectionDDL = `
CREATE TABLE messages (
	id uuid PRIMARY KEY, version int NOT NULL, source text NOT NULL, from_party text NOT NULL,
	to_party text NOT NULL, content_type text NOT NULL, idempotency_key text, ordering_key text, duplicate_key text,
	possible_duplicate_of uuid, type text, generation int NOT NULL DEFAULT 1, payload_size bigint NOT NULL,
	payload_sha256 text NOT NULL, stage text NOT NULL, refusal text, status text NOT NULL, error text NOT NULL,
	delivery_count int NOT NULL, created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL, payload_expunged boolean NOT NULL DEFAULT false,
	traceparent text, tracestate text, baggage text, headers jsonb,
	CONSTRAINT messages_idempotency_key UNIQUE (source, idempotency_key)
);
CREATE INDEX messages_created ON messages (created_at DESC, id DESC);
CREATE INDEX messages_status_created ON messages (status, created_at DESC, id DESC);
CREATE INDEX messages_source_created ON messages (source, created_at DESC, id DESC);
CREATE INDEX messages_ordering_key_created ON messages (ordering_key, created_at DESC, id DESC) WHERE ordering_key IS NOT NULL;
CREATE INDEX messages_duplicate_key ON messages (source, duplicate_key, created_at DESC) WHERE duplicate_key IS NOT NULL;
CREATE INDEX messages_possible_duplicate_created ON messages (created_at DESC, id DESC) WHERE possible_duplicate_of IS NOT NULL;
CREATE TABLE deliveries (
	id uuid PRIMARY KEY, message_id uuid NOT NULL, message_created_at timestamptz NOT NULL, seq int NOT NULL,
	version int NOT NULL, generation int NOT NULL DEFAULT 1, target text NOT NULL,
	lane_key text, lane_seq bigint NOT NULL DEFAULT 0, lane_continue bool NOT NULL DEFAULT false, state text NOT NULL,
	attempts int NOT NULL, dispatch_count int NOT NULL, redeliveries int NOT NULL, redelivered_at timestamptz,
	redelivered_attempts int NOT NULL, next_due timestamptz,
	claim_token uuid, lease_end timestamptz, last_error text NOT NULL, created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL, finished_at timestamptz, shaped bool NOT NULL DEFAULT false,
	CONSTRAINT deliveries_message_seq UNIQUE (message_id, seq)
);
CREATE INDEX deliveries_due ON deliveries (state, next_due) WHERE next_due IS NOT NULL;
CREATE INDEX deliveries_lease ON deliveries (lease_end) WHERE state = 'delivering';
CREATE INDEX deliveries_target_message ON deliveries (target, message_created_at DESC, message_id DESC);
CREATE INDEX deliveries_lane ON deliveries (target, lane_key, lane_seq) WHERE state = 'blocked';
CREATE TABLE lanes (
	target text NOT NULL, ordering_key text NOT NULL, last_seq bigint NOT NULL, head_delivery_id uuid,
	head_message_id uuid, head_since timestamptz, head_settled bool NOT NULL, waiting bigint NOT NULL,
	waiting_since timestamptz, held bool NOT NULL,
	CONSTRAINT lanes_pkey PRIMARY KEY (target, ordering_key)
);
CREATE INDEX lanes_waiting ON lanes (target, ordering_key) WHERE waiting > 0;
`

// projectionSchema describes the projection tables: columns, constraints
// and indexes.
func projectionSchema(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		SELECT format('column %s.%s %s %s', table_name, column_name, data_type, is_nullable)
		FROM information_schema.columns WHERE table_name IN ('messages', 'deliveries', 'lanes', 'operations')
		UNION ALL
		SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
		FROM pg_constraint WHERE conrelid IN ('messages'::regclass, 'deliveries'::regclass, 'lanes'::regclass, 'operations'::regclass)
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE tablename IN ('messages', 'deliveries', 'lanes', 'operations')
		UNION ALL
		SELECT format('version %s %s', part, version) FROM schema_version
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProjectionTablesAreTheSameEveryWay compares the projection tables
// Ensure makes, RecreateProjections makes, and an earlier build made.
func TestProjectionTablesAreTheSameEveryWay(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	open := func() *pgxpool.Pool {
		db, err := pgxpool.New(ctx, dbtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		return db
	}
	fresh := open()
	if err := schema.Ensure(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	want := projectionSchema(t, fresh)
	if n := len(slices.DeleteFunc(slices.Clone(want), func(s string) bool { return !strings.HasPrefix(s, "index ") })); n != 26 {
		t.Fatalf("%d indexes:\n%s", n, strings.Join(want, "\n"))
	}

	if err := schema.RecreateProjections(ctx, fresh, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := projectionSchema(t, fresh); !slices.Equal(got, want) {
		t.Errorf("recreated:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	legacy := open()
	if _, err := legacy.Exec(ctx, legacyProjectionDDL); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if got := projectionSchema(t, legacy); !slices.Equal(got, want) {
		t.Errorf("made by an earlier build:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRecreateProjectionsIsOneTransaction fills the tables through
// RecreateProjections, with COPY FREEZE, and fails one: the tables are the
// old ones until a recreation commits.
func TestRecreateProjectionsIsOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := dbtest.Pool(t)
	insert := `INSERT INTO deliveries (id, message_id, message_created_at, seq, version, target, state, attempts, dispatch_count,
		redeliveries, redelivered_attempts, last_error, created_at, updated_at)
		VALUES (gen_random_uuid(), gen_random_uuid(), now(), 1, 1, $1, 'queued', 0, 1, 0, 0, '', now(), now())`
	if _, err := db.Exec(ctx, insert, "old"); err != nil {
		t.Fatal(err)
	}
	targets := func() string {
		var s string
		if err := db.QueryRow(ctx, `SELECT coalesce(string_agg(target, ','), '') FROM deliveries`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	failed := errors.New("load failed")
	err := schema.RecreateProjections(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insert, "new"); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) || targets() != "old" {
		t.Fatalf("failed recreation: %v; deliveries of %q", err, targets())
	}
	err = schema.RecreateProjections(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Conn().PgConn().CopyFrom(ctx, strings.NewReader("00000000-0000-0000-0000-000000000001\t"+
			"00000000-0000-0000-0000-000000000002\t2026-01-01 00:00:00+00\t1\t1\tnew\tqueued\t0\t1\t0\t\\N\t0\t\\N\t\\N\t\\N\t\t2026-01-01 00:00:00+00\t2026-01-01 00:00:00+00\t\\N\n"),
			`COPY deliveries (id, message_id, message_created_at, seq, version, target, state, attempts, dispatch_count, redeliveries,
				redelivered_at, redelivered_attempts, next_due, claim_token, lease_end, last_error, created_at, updated_at,
				finished_at) FROM STDIN (FREEZE)`)
		return err
	})
	if err != nil || targets() != "new" {
		t.Fatalf("recreation: %v; deliveries of %q", err, targets())
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	// Projections of another version are replaced with this code's.
	if _, err := db.Exec(ctx, `UPDATE schema_version SET version = 99 WHERE part = 'projections'`); err != nil {
		t.Fatal(err)
	}
	if err := schema.RecreateProjections(ctx, db, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatalf("Ensure after recreating projections of another version: %v", err)
	}
}

// TestAfterConnectSendsUUIDsAsTheyAre sends uuids, nil and not, alone and
// in arrays, through a connection AfterConnect prepared: they read back the
// same, as text too.
func TestAfterConnectSendsUUIDsAsTheyAre(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t) // prepared by schema.AfterConnect
	id := uuid.New()
	var (
		back []uuid.UUID
		text string
	)
	err := db.QueryRow(t.Context(), `SELECT $1::uuid[] || ARRAY[$2::uuid], $2::uuid::text`,
		[]uuid.UUID{id, uuid.Nil}, id).Scan(&back, &text)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, []uuid.UUID{id, uuid.Nil, id}) || text != id.String() {
		t.Errorf("read back %v and %q, sent %s", back, text, id)
	}
}

// TestEnsureOpensTheKeysToEveryOwner: a database whose target_keys was
// made when only targets had keys (with a reference to targets) loses the
// reference and keeps its keys, so Waybill's own keys can be stored
// beside them; the journal's version stays.
func TestEnsureOpensTheKeysToEveryOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `
		CREATE TABLE targets (name text PRIMARY KEY, spec jsonb NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);
		CREATE TABLE target_keys (
			target      text        NOT NULL REFERENCES targets (name) ON DELETE CASCADE,
			key_id      text        NOT NULL,
			scheme      text        NOT NULL,
			secret      bytea       NOT NULL,
			public      bytea,
			fingerprint text        NOT NULL,
			created_at  timestamptz NOT NULL,
			expires_at  timestamptz,
			PRIMARY KEY (target, key_id));
		INSERT INTO targets VALUES ('web', '{}', now(), now());
		INSERT INTO target_keys VALUES ('web', 'key_1', 'hmac-sha256', '\x00', NULL, 'sha256:00', now(), NULL);`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := schema.Ensure(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	var references, kept int
	if err := db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_constraint WHERE conrelid = 'target_keys'::regclass AND contype = 'f'),
		(SELECT count(*) FROM target_keys WHERE target = 'web' AND key_id = 'key_1')`).Scan(&references, &kept); err != nil {
		t.Fatal(err)
	}
	if references != 0 || kept != 1 {
		t.Fatalf("%d references left, %d of the stored key kept", references, kept)
	}
	if _, err := db.Exec(ctx, `INSERT INTO target_keys VALUES ('@callbacks', 'key_2', 'hmac-sha256', '\x00', NULL, 'sha256:01', now(), NULL)`); err != nil {
		t.Fatalf("a reserved owner's key: %v", err)
	}
	var version int
	if err := db.QueryRow(ctx, `SELECT version FROM schema_version WHERE part = 'journal'`).Scan(&version); err != nil || version != schema.JournalVersion {
		t.Fatalf("journal version %d: %v", version, err)
	}
}

// TestUpgradeLeavesTheOldDefaultMaxConcurrentOut: the rebuild that makes
// the projections this build's, on a database of an older build, leaves
// out the max_concurrent the older build filled in (5 for http, 1 for
// file), keeps any other, and does so once: a 5 saved afterwards stays,
// through a rebuild and the DDL run again.
func TestUpgradeLeavesTheOldDefaultMaxConcurrentOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	define := func(name, spec string) {
		t.Helper()
		if _, err := db.Exec(ctx, `INSERT INTO targets (name, spec, created_at, updated_at) VALUES ($1, $2, now(), now())`, name, spec); err != nil {
			t.Fatal(err)
		}
	}
	// What an older build left: its definitions, and no record of the
	// upgrade.
	define("web", `{"name": "web", "kind": "http", "max_concurrent": 5}`)
	define("disk", `{"name": "disk", "kind": "file", "max_concurrent": 1}`)
	define("slow", `{"name": "slow", "kind": "http", "max_concurrent": 2}`)
	define("wide", `{"name": "wide", "kind": "file", "max_concurrent": 5}`)
	if _, err := db.Exec(ctx, `DELETE FROM schema_version WHERE part = 'targets'; DROP TABLE target_buckets;
		UPDATE schema_version SET version = version - 1 WHERE part = 'projections'`); err != nil {
		t.Fatal(err)
	}
	var ve *schema.VersionError
	if err := schema.Ensure(ctx, db); !errors.As(err, &ve) || ve.Part != schema.PartProjections {
		t.Fatalf("Ensure on the older projections: %v", err)
	}
	rebuild := func() {
		t.Helper()
		if err := schema.RecreateProjections(ctx, db, func(pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	rebuild()
	want := map[string]string{"web": "", "disk": "", "slow": "2", "wide": "5"}
	check := func() {
		t.Helper()
		for name, mc := range want {
			var got *string
			if err := db.QueryRow(ctx, `SELECT spec->>'max_concurrent' FROM targets WHERE name = $1`, name).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (mc == "") || got != nil && *got != mc {
				t.Errorf("target %s: max_concurrent %v after the upgrade, want %q", name, got, mc)
			}
		}
	}
	check()
	define("set", `{"name": "set", "kind": "http", "max_concurrent": 5}`)
	want["set"] = "5"
	rebuild()
	if _, err := db.Exec(ctx, `DELETE FROM schema_digest`); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	check()
}
