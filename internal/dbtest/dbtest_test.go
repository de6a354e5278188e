package dbtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/schema"
)

func TestMain(m *testing.M) { Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestURLParallel(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn := connect(t, URL(t))
			// The same table in both subtests: this fails if they share a
			// database.
			if _, err := conn.Exec(t.Context(), "CREATE TABLE item (name text)"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), "INSERT INTO item VALUES ($1)", name); err != nil {
				t.Fatal(err)
			}
			rows, _ := conn.Query(t.Context(), "SELECT name FROM item")
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if len(names) != 1 || names[0] != name {
				t.Errorf("item = %q, want only %q", names, name)
			}
		})
	}
}

func TestURLIsolated(t *testing.T) {
	first, second := connect(t, URL(t)), connect(t, URL(t))
	if _, err := first.Exec(t.Context(), "CREATE TABLE only_first (v int)"); err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := second.QueryRow(t.Context(), "SELECT to_regclass('only_first') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Error("table created in one test database is visible in another")
	}
}

func TestURLDropped(t *testing.T) {
	var name string
	t.Run("use", func(t *testing.T) {
		if err := connect(t, URL(t)).QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.HasPrefix(name, "waybill_test_") {
		t.Fatalf("database name %q lacks the waybill_test_ prefix", name)
	}
	var exists bool
	err := connect(t, AdminURL()).QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestProxyCutAndRestore(t *testing.T) {
	t.Parallel()
	p := NewProxy(t, Pool(t))
	db := p.Pool(t)
	ping := func() error {
		var one int
		return db.QueryRow(t.Context(), "SELECT 1").Scan(&one)
	}
	if err := ping(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Cut()
	// The pooled connection is gone, and so is any new one.
	for range 2 {
		if err := ping(); err == nil {
			t.Fatal("query through a cut proxy succeeded")
		}
	}
	if p.Refused() == 0 {
		t.Error("no connection refused while cut")
	}
	p.Restore()
	if err := ping(); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestPoolsAreCopiesOfTheSchemaAndIsolated(t *testing.T) {
	t.Parallel()
	first := Pool(t)
	// What a test does to its copy reaches neither the template nor the
	// next copy.
	if _, err := first.Exec(t.Context(), "DROP TABLE journal CASCADE"); err != nil {
		t.Fatal(err)
	}
	second := Pool(t)
	for part, want := range map[string]int{schema.PartJournal: schema.JournalVersion, schema.PartProjections: schema.ProjectionVersion} {
		if got, err := schema.StoredVersion(t.Context(), second, part); err != nil || got != want {
			t.Errorf("%s version %d, %v; want %d", part, got, err, want)
		}
	}
	var found bool
	if err := second.QueryRow(t.Context(), "SELECT to_regclass('journal') IS NOT NULL").Scan(&found); err != nil || !found {
		t.Errorf("journal table in the second copy: %v, %v", found, err)
	}
}
