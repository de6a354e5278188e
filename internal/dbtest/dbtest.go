package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/pgserver"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
)

// envURL is the environment variable naming a server to use instead of a
// throwaway one. Its database is the maintenance database that URL
// connects to for CREATE DATABASE and DROP DATABASE.
const envURL = "WAYBILL_TEST_DATABASE_URL"

// timeout bounds each harness step, so a stuck server fails the tests
// rather than hanging them until go test's own timeout.
const timeout = time.Minute

// adminURL is the maintenance URL Main set up, empty before Main runs.
var adminURL string

// Main runs the package's tests against a PostgreSQL: the URL in
// WAYBILL_TEST_DATABASE_URL when set, otherwise a throwaway server started
// with pgserver in a temp dir (settings fsync=off, synchronous_commit=off,
// full_page_writes=off, max_connections=200), stopped and removed after
// m.Run; none for a run of a fuzz target alone (`-run '^$' -fuzz …`).
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// It os.Exit's with m.Run's code.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit: it returns m.Run's code, for a TestMain
// that has cleanup of its own to do after the tests.
func Run(m *testing.M) int {
	if u := os.Getenv(envURL); u != "" {
		adminURL = u
		defer dropTemplate()
		return m.Run()
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	if flagIs("test.run", "^$") && !flagIs("test.fuzz", "") {
		// A run of a fuzz target alone (make test's fuzzing, whose
		// workers are this binary too, with the same flags) needs no
		// server: starting one per process would cost more than the few
		// seconds it fuzzes.
		return m.Run()
	}

	dir, err := os.MkdirTemp("", "waybill-dbtest-*")
	if err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: create server dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// As root, pgserver runs the server as the postgres user, which must
	// be able to reach the data directory inside.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
		return 1
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	srv := pgserver.New(pgserver.Config{
		DataDir: filepath.Join(dir, "data"),
		// Durability buys nothing for a server deleted after the run.
		Settings: map[string]string{
			"fsync":              "off",
			"synchronous_commit": "off",
			"full_page_writes":   "off",
			"max_connections":    "200",
		},
		// Keep test output to what matters.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		srv.Stop(ctx)
	}()
	if err := srv.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
		return 1
	}

	adminURL = srv.URL("postgres")
	return m.Run()
}

// template is the database every Pool's database is copied from: an
// empty one with Waybill's schema, made by the first Pool of the process,
// because copying it takes about half the time of creating the schema in
// each test's database.
var template struct {
	once sync.Once
	name string
	err  error
}

// schemaTemplate returns the template's name, making it on the first call.
func schemaTemplate(admin url.URL) (string, error) {
	template.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		name := newName("waybill_test_template_")
		if err := adminExec(ctx, admin.String(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
			template.err = fmt.Errorf("create template database %s: %w", name, err)
			return
		}
		template.name = name
		admin.Path = "/" + name
		// Closed before any copy: CREATE DATABASE refuses a template anyone
		// is connected to.
		db, err := pgxpool.New(ctx, admin.String())
		if err != nil {
			template.err = fmt.Errorf("template database %s: %w", name, err)
			return
		}
		defer db.Close()
		if err := schema.Ensure(ctx, db); err != nil {
			template.err = fmt.Errorf("template database %s: %w", name, err)
		}
	})
	return template.name, template.err
}

// dropTemplate drops the template, if one was made, from a server that
// outlives the tests (WAYBILL_TEST_DATABASE_URL's).
func dropTemplate() {
	if template.name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := adminExec(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{template.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: drop template database %s: %v\n", template.name, err)
	}
}

// newName returns prefix followed by 16 random hex digits.
func newName(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// flagIs reports whether the flag name is v.
func flagIs(name, v string) bool {
	f := flag.Lookup(name)
	return f != nil && f.Value.String() == v
}

// AdminURL returns the URL of the maintenance database: the throwaway
// server's postgres database, or WAYBILL_TEST_DATABASE_URL. It is empty
// when Main has not run and the variable is unset.
func AdminURL() string {
	if adminURL != "" {
		return adminURL
	}
	return os.Getenv(envURL)
}

// URL creates a fresh, empty database for the test, named
// waybill_test_<random hex> so parallel tests and other test processes on
// the same server never collide, with JIT compilation off, and returns its
// URL. The database is
// dropped, disconnecting any sessions left on it, when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	// TEMPLATE template0, because template1 refuses to be copied while
	// anyone is connected to it, which on a shared server can happen.
	return create(t, "template0")
}

// server returns the maintenance database's URL, failing the test when
// there is none.
func server(t testing.TB) *url.URL {
	t.Helper()
	admin := AdminURL()
	if admin == "" {
		t.Fatalf("dbtest: no test database server: call dbtest.Main from TestMain (func TestMain(m *testing.M) { dbtest.Main(m) }) or set %s", envURL)
	}
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("dbtest: maintenance database %q is not a postgres:// URL", redact(admin))
	}
	return u
}

// create makes a fresh database copied from the database tmpl, dropped
// when the test ends, and returns its URL.
func create(t testing.TB, tmpl string) string {
	t.Helper()
	u := server(t)
	admin := u.String()
	name := newName("waybill_test_")
	if err := adminExec(t.Context(), admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		t.Fatalf("dbtest: create database %s: %v", name, err)
	}
	// JIT off for every session on it, as serve's pool has it (openDB),
	// whichever pool or process connects: under the Writer's plan
	// settings (projection.LookupPlanSQL) a statement that can only scan
	// a table is costed past jit_above_cost, and compiling it took 0.3 to
	// 2 s of each outcome's transaction, so a test's drain ran at a
	// delivery a second per slot.
	if err := adminExec(t.Context(), admin, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET jit = off"); err != nil {
		t.Fatalf("dbtest: set up database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// Not t.Context: it is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})

	u.Path = "/" + name
	return u.String()
}

// adminExec runs sql on its own connection to the maintenance database.
func adminExec(ctx context.Context, admin, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// redact hides a URL's password for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

// Pool returns a pool on a fresh database (see URL) that holds Waybill's
// schema, copied from a template made once per process, its connections
// prepared as a server's are; the pool is closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	tmpl, err := schemaTemplate(*server(t))
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(create(t, tmpl))
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.AfterConnect = schema.AfterConnect
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

// Audit replays the whole journal of db and fails the test for every
// violation the audit finds.
func Audit(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	r, err := projection.Audit(context.Background(), db, uuid.Nil)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for _, v := range r.Violations {
		t.Errorf("audit: %s", v)
	}
}

// Kinds lists the kinds of a delivery's events, in order.
func Kinds(t testing.TB, db *pgxpool.Pool, d projection.Delivery) []journal.Kind {
	t.Helper()
	events, err := journal.Stream(context.Background(), db, journal.MessageStream(d.MessageID))
	if err != nil {
		t.Fatalf("read stream of message %s: %v", d.MessageID, err)
	}
	var kinds []journal.Kind
	for _, e := range events {
		if e.DeliveryID == d.ID {
			kinds = append(kinds, e.Kind())
		}
	}
	return kinds
}

// Explain gives the plan of sql with args as EXPLAIN prints it, read
// through q: a transaction with the settings the statement runs under.
func Explain(t testing.TB, q journal.Querier, sql string, args ...any) string {
	t.Helper()
	rows, err := q.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	return strings.Join(plan, "\n")
}
