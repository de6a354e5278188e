package pgserver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/service"
)

// testDataDir returns a data directory path that does not exist yet. It is
// not under t.TempDir: that one's parent is 0700, which the postgres user
// cannot traverse when the tests run as root.
func testDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgserver-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "data")
}

// start starts a server on dataDir with settings that make it quick, and
// stops it at the end of the test.
func start(t *testing.T, dataDir string) *Server {
	t.Helper()
	s := New(Config{
		DataDir:  dataDir,
		Settings: map[string]string{"fsync": "off", "full_page_writes": "off"},
	})
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestFindBinDir(t *testing.T) {
	dir, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if !hasBinaries(dir) {
		t.Fatalf("FindBinDir() = %q, which lacks postgres or initdb", dir)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	dataDir := testDataDir(t)
	s := start(t, dataDir)

	conn := connect(t, s.URL("postgres"))
	var one int
	if err := conn.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	var fsync string
	if err := conn.QueryRow(t.Context(), "SHOW fsync").Scan(&fsync); err != nil || fsync != "off" {
		t.Errorf("SHOW fsync = %q, %v; want off from Config.Settings", fsync, err)
	}

	fi, err := os.Stat(filepath.Join(dataDir, passwordFileName))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("password file mode = %v, want 0600", perm)
	}

	noPassword := strings.Replace(s.URL("postgres"), ":"+s.inst.password+"@", "@", 1)
	if conn, err := pgx.Connect(t.Context(), noPassword); err == nil {
		conn.Close(t.Context())
		t.Error("connected without a password")
	}

	s.Stop(t.Context())
	if s.inst.running() {
		t.Error("server still running after Stop")
	}
	s.Stop(t.Context())
	if err := s.Start(t.Context()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// TestStopBeforeStart: the server is a service.Service, whose Stop is
// safe without a Start, and after which Start is refused.
func TestStopBeforeStart(t *testing.T) {
	var _ service.Service = (*Server)(nil)
	s := New(Config{DataDir: testDataDir(t)})
	s.Stop(t.Context())
	s.Stop(t.Context())
	if err := s.Start(t.Context()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	dataDir := testDataDir(t)

	s := start(t, dataDir)
	conn := connect(t, s.URL("postgres"))
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(t.Context())
	s.Stop(t.Context())

	s = start(t, dataDir)
	var v string
	if err := connect(t, s.URL("postgres")).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v); err != nil || v != "x" {
		t.Fatalf("after restart: SELECT v FROM kept = %q, %v", v, err)
	}
}

// TestAdopt: a second Start on the data directory adopts the running
// server, and its Stop leaves it running: only the first Start stops it.
func TestAdopt(t *testing.T) {
	t.Parallel()
	dataDir := testDataDir(t)

	// The first server stands in for one an earlier process left running.
	first := start(t, dataDir)
	adopted := start(t, dataDir)
	if first.Adopted() || !adopted.Adopted() {
		t.Errorf("Adopted: %v for the first start, %v for the second; want false, true", first.Adopted(), adopted.Adopted())
	}
	if a, f := adopted.inst, first.inst; a.proc != nil || a.pid != f.pid || a.port != f.port {
		t.Fatalf("second Start did not adopt: pid %d port %d, want pid %d port %d", a.pid, a.port, f.pid, f.port)
	}
	var one int
	if err := connect(t, adopted.URL("postgres")).QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}

	// Stopping the adopted server leaves it running for the process that
	// started it.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	adopted.Stop(ctx)
	if !first.inst.running() {
		t.Fatal("Stop of the adopted server stopped it")
	}
	if err := connect(t, first.URL("postgres")).QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the server after the adopter's Stop: %v", err)
	}

	first.Stop(ctx)
	if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("postmaster.pid after Stop: %v", err)
	}
}

func TestStartPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	err = New(Config{DataDir: testDataDir(t), Port: port}).Start(t.Context())
	if err == nil {
		t.Fatal("Start on a taken port succeeded")
	}
	// The error carries the server log's tail, which names the cause.
	if !strings.Contains(err.Error(), "Address already in use") || !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Errorf("error does not report the taken port from the server log: %v", err)
	}
}

func TestStartRejectsReservedSetting(t *testing.T) {
	err := New(Config{DataDir: testDataDir(t), Settings: map[string]string{"Port": "1"}}).Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "managed by pgserver") {
		t.Fatalf("Start with Settings[Port] = %v, want rejection", err)
	}
}

func TestStartUntraversableParent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root switches to the postgres user")
	}
	// t.TempDir's parent is a root-owned 0700 directory.
	err := New(Config{DataDir: filepath.Join(t.TempDir(), "data")}).Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "not searchable") {
		t.Fatalf("Start under a 0700 root directory = %v, want a not-searchable error", err)
	}
}
