// Package dbtest gives every package's tests a real PostgreSQL: the server at
// WAYBILL_TEST_DATABASE_URL, or a throwaway one started from the machine's
// server binaries, with a fresh database per test so tests run in parallel.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/pgserver"
)

// adminURL is the maintenance database's URL, set by Main.
var adminURL string

// Main runs the package's tests against PostgreSQL and exits with their
// code: call it from TestMain. Without WAYBILL_TEST_DATABASE_URL it starts a
// server in a temporary directory (durability off, for speed) and removes it
// afterwards.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if adminURL = os.Getenv("WAYBILL_TEST_DATABASE_URL"); adminURL != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "waybill-pg-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dbtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The server may run as another user (as root it must), who needs to
	// reach the data directory below this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "dbtest:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := pgserver.Start(ctx, pgserver.Config{
		DataDir: dir + "/data",
		Settings: map[string]string{
			"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "200",
		},
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dbtest: start PostgreSQL:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "dbtest: stop PostgreSQL:", err)
		}
	}()
	adminURL = srv.URL("postgres")
	return m.Run()
}

// AdminURL is the URL of the server's maintenance database.
func AdminURL() string { return adminURL }

// URL creates a fresh, empty database for the test, dropped when it ends,
// and returns its URL.
func URL(t testing.TB) string {
	t.Helper()
	if adminURL == "" {
		t.Fatal("dbtest: no database server: call dbtest.Main from TestMain, or set WAYBILL_TEST_DATABASE_URL")
	}
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	name := "waybill_test_" + hex.EncodeToString(suffix)
	exec(t, "CREATE DATABASE "+name)
	t.Cleanup(func() { exec(t, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatalf("dbtest: parse %s: %v", adminURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

func exec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("dbtest: %s: %v", sql, err)
	}
}
