package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// embeddedDataDir returns a data directory for a server with its embedded
// PostgreSQL. It is not under t.TempDir: as root the PostgreSQL runs as the
// postgres user, which must reach the directory. At the end of the test a
// PostgreSQL still running on it is stopped.
func embeddedDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "waybill-datadir-*")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "var")
	t.Cleanup(func() {
		if pid := postmasterPID(filepath.Join(dataDir, "pg")); pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGINT)
			for deadline := time.Now().Add(30 * time.Second); processAlive(pid) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
		}
		os.RemoveAll(dir)
	})
	return dataDir
}

// postmasterPID is the PID a PostgreSQL data directory's postmaster.pid
// names; 0 when there is none.
func postmasterPID(pgDir string) int {
	b, err := os.ReadFile(filepath.Join(pgDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// stopServer stops a server with SIGTERM and fails the test unless it exits 0.
func stopServer(t *testing.T, s *server) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v", err)
	}
}

// TestSecondServeRefused starts a second server on the data directory of
// a running one, on another address and on the same: each is refused at
// once, naming the first, and changes nothing; the first keeps serving on
// its database.
func TestSecondServeRefused(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dataDir := embeddedDataDir(t)
	first := startServer(t, bin, "--data-dir", dataDir)
	urlFile := filepath.Join(dataDir, databaseURLFile)
	before, err := os.ReadFile(urlFile)
	if err != nil {
		t.Fatal(err)
	}

	want := fmt.Sprintf("another waybill serve (pid %d, http://%s) uses %s", first.cmd.Process.Pid, first.addr, dataDir)
	for _, listen := range []string{freeAddr(t), first.addr} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		second := exec.CommandContext(ctx, bin, "serve", "--listen", listen, "--data-dir", dataDir)
		var out bytes.Buffer
		second.Stdout, second.Stderr = &out, &out
		err := second.Run()
		cancel()
		if code := second.ProcessState.ExitCode(); code != 1 || !strings.Contains(out.String(), want) {
			t.Fatalf("second serve on %s: exit %d (%v), want 1 and %q; it said:\n%s", listen, code, err, want, out.String())
		}
		if strings.Contains(out.String(), "postgres") {
			t.Errorf("second serve on %s touched the PostgreSQL:\n%s", listen, out.String())
		}
	}

	waitReady(t, "http://"+first.addr+"/readyz")
	if after, err := os.ReadFile(urlFile); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("%s after the second serve: %q, %v; want it unchanged", urlFile, after, err)
	}
	// The first still has its database.
	if code, _, errOut := waybillCLI(t, "token", "list", "--database-url", "", "--data-dir", dataDir); code != 0 {
		t.Fatalf("token list beside the first server: exit %d: %s", code, errOut)
	}
	waitReady(t, "http://"+first.addr+"/readyz")
	stopServer(t, first)
}

// TestServeTakesOverStaleLock kills a server with SIGKILL, which leaves the
// data directory's lock file and the URL files behind: the next server
// takes the directory over, writes its own address, and the client commands
// find it there on its non-default port. Its stop removes the URL files.
func TestServeTakesOverStaleLock(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dataDir := embeddedDataDir(t)
	first := startServer(t, bin, "--data-dir", dataDir)
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()

	next := startServer(t, bin, "--data-dir", dataDir)
	serverURL := filepath.Join(dataDir, serverURLFile)
	data, err := os.ReadFile(serverURL)
	if err != nil || strings.TrimSpace(string(data)) != "http://"+next.addr {
		t.Fatalf("%s: %q, %v; want http://%s", serverURL, data, err, next.addr)
	}
	if info, err := os.Stat(serverURL); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", serverURL, info, err)
	}

	// The client finds the server through the data directory, with the
	// admin token found there too.
	messages := exec.Command(bin, "messages", "--data-dir", dataDir)
	messages.Env = withoutEnv("WAYBILL_SERVER", "WAYBILL_TOKEN")
	if out, err := messages.CombinedOutput(); err != nil {
		t.Fatalf("waybill messages --data-dir: %v\n%s", err, out)
	}

	stopServer(t, next)
	for _, name := range []string{serverURLFile, databaseURLFile} {
		if _, err := os.Stat(filepath.Join(dataDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the stop: %v, want it removed", name, err)
		}
	}
}

// withoutEnv is the environment of this process without the named
// variables.
func withoutEnv(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			env = append(env, kv)
		}
	}
	return env
}

func TestDialURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9090": "http://127.0.0.1:9090",
		"0.0.0.0:9090":   "http://127.0.0.1:9090",
		"[::]:9090":      "http://[::1]:9090",
		"[::1]:9090":     "http://[::1]:9090",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialURL(a); got != want {
			t.Errorf("dialURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestEmbeddedServerIsPrivate: serve makes a data directory that was open
// to others private, with a warning, and connects to its embedded
// PostgreSQL as a role that owns the waybill database and is no superuser.
func TestEmbeddedServerIsPrivate(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dataDir := embeddedDataDir(t)
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, bin, "--data-dir", dataDir)
	info, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o067 != 0 {
		t.Errorf("the data directory has mode %v", info.Mode().Perm())
	}
	if !strings.Contains(s.logs.String(), "the data directory's mode was changed") {
		t.Errorf("no warning of the mode changed:\n%s", s.logs.String())
	}
	url, err := os.ReadFile(filepath.Join(dataDir, databaseURLFile))
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(t.Context(), strings.TrimSpace(string(url)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var user string
	var super, owns bool
	if err := db.QueryRow(t.Context(), `SELECT current_user, rolsuper, (SELECT datdba = r.oid FROM pg_database WHERE datname = current_database())
		FROM pg_roles r WHERE rolname = current_user`).Scan(&user, &super, &owns); err != nil {
		t.Fatal(err)
	}
	if user != "waybill" || super || !owns {
		t.Errorf("serve connects as %s, superuser %t, owner of its database %t", user, super, owns)
	}
	stopServer(t, s)
}
