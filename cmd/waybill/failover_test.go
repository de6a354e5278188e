package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/pgserver"
)

// asServerUser runs cmd as the user pgserver runs PostgreSQL as: postgres,
// when the test runs as root.
func asServerUser(t *testing.T, cmd *exec.Cmd, dirs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	for _, dir := range dirs {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailoverToASynchronousStandby runs a server on a primary PostgreSQL
// with a synchronous streaming standby, given both hosts in one URL
// (target_session_attrs=read-write). Under a steady ingest the primary
// is stopped at once (-m immediate) and the standby promoted: the server
// answers 503 with Retry-After meanwhile and nothing else but 201 or 200,
// follows the new primary without a restart, and every acknowledged
// message is there and delivered once; the audit is clean.
func TestFailoverToASynchronousStandby(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL binaries: %v", err)
	}
	root, err := os.MkdirTemp("", "waybill-failover-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// The server user must reach the data directories inside.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(name string, settings map[string]string) *pgserver.Server {
		srv := pgserver.New(pgserver.Config{DataDir: filepath.Join(root, name), Settings: settings, Logger: quiet})
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv.Stop(stopCtx)
		})
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	primary := start("primary", nil)
	dbURL, err := primary.CreateOwnedDatabase(ctx, "waybill")
	if err != nil {
		t.Fatal(err)
	}

	// The standby: a base backup of the primary that streams from it
	// under the name the primary waits for.
	admin, err := url.Parse(primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	password, _ := admin.User.Password()
	standbyDir := filepath.Join(root, "standby")
	if err := os.Mkdir(standbyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	backup := exec.CommandContext(ctx, filepath.Join(binDir, "pg_basebackup"), "-D", standbyDir, "-R", "-X", "stream", "--checkpoint", "fast",
		"-d", fmt.Sprintf("host=%s port=%s user=%s application_name=standby", admin.Hostname(), admin.Port(), admin.User.Username()))
	backup.Env = append(os.Environ(), "PGPASSWORD="+password)
	backup.Dir = "/"
	asServerUser(t, backup, standbyDir)
	if out, err := backup.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	standby := start("standby", nil)
	standbyAdmin, err := url.Parse(standby.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	// Synchronous from now on: a commit waits for the standby to have it.
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = 'standby'`, `SELECT pg_reload_conf()`} {
		if err := pgxExec(ctx, primary.URL("postgres"), sql); err != nil {
			t.Fatal(err)
		}
	}
	testpoll.Until(t, "the standby streams synchronously", func() bool {
		var state string
		err := pgxQueryRow(ctx, primary.URL("postgres"), `SELECT coalesce(max(sync_state), '') FROM pg_stat_replication WHERE application_name = 'standby'`, &state)
		return err == nil && state == "sync"
	})

	both, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	both.Host = both.Host + "," + standbyAdmin.Host
	q := both.Query()
	q.Set("target_session_attrs", "read-write")
	both.RawQuery = q.Encode()

	var (
		mu   sync.Mutex
		hits = map[string]int{} // delivery id → requests received
	)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		hits[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	}))
	defer sink.Close()

	dir := t.TempDir()
	srv := startServer(t, buildBinary(t), "--database-url", both.String(), "--data-dir", dir)
	api := srv.adminClient(t, dir)
	api.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "enabled": true,
		"config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	api.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)

	var (
		ackMu       sync.Mutex
		acked       = map[string]bool{} // message id
		unavailable atomic.Int64
		done        atomic.Bool
		wg          sync.WaitGroup
	)
	wg.Go(func() {
		for n := 0; !done.Load(); n++ {
			key := fmt.Sprintf("m%d", n)
			body, _ := json.Marshal(map[string]any{"source": "erp", "from": "a", "to": "b", "payload": key, "idempotency_key": key})
			for {
				req, _ := http.NewRequest("POST", api.base+"/messages", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+api.token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("ingest %s: %v", key, err)
					return
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
					unavailable.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				var m struct{ ID string }
				if (resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK) || json.Unmarshal(data, &m) != nil {
					t.Errorf("ingest %s: %d %s", key, resp.StatusCode, data)
					return
				}
				ackMu.Lock()
				acked[m.ID] = true
				ackMu.Unlock()
				break
			}
		}
	})
	count := func() int {
		ackMu.Lock()
		defer ackMu.Unlock()
		return len(acked)
	}
	testpoll.Until(t, "ingest under way", func() bool { return count() >= 100 })

	// -m immediate: the postmaster's SIGQUIT.
	pid, err := os.ReadFile(filepath.Join(root, "primary", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	postmaster, _ := strconv.Atoi(strings.SplitN(string(pid), "\n", 2)[0])
	if err := syscall.Kill(postmaster, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the primary gone", func() bool { return syscall.Kill(postmaster, 0) != nil })
	if err := pgxQueryRow(ctx, standby.URL("postgres"), `SELECT pg_promote()`, new(bool)); err != nil {
		t.Fatal(err)
	}
	promoted := count()
	testpoll.Until(t, "ingest under way on the new primary", func() bool { return count() >= promoted+100 })
	done.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d messages acknowledged, %d answers 503 on the way", count(), unavailable.Load())

	db, err := pgxpool.New(ctx, standby.URL("waybill"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A claim whose commit reached the standby but whose answer was lost
	// with the primary leaves its delivery to its lease (the default
	// attempt timeout's, 2 × 30 s + 1 min) and then to the sweep.
	waitEveryMessageDeliveredWithin(t, db, 2*time.Minute+time.Minute)
	rows, err := db.Query(ctx, `SELECT stream, count(*) FILTER (WHERE payload->'outcome'->>'kind' = 'delivered')
		FROM journal WHERE kind = $1 GROUP BY 1`, journal.KindDeliveryAttempted)
	if err != nil {
		t.Fatal(err)
	}
	delivered := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		delivered[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	ackMu.Lock()
	for id := range acked {
		if n := delivered[journal.MessageStream(uuid.MustParse(id))]; n != 1 {
			t.Errorf("message %s delivered %d times, want once", id, n)
		}
	}
	ackMu.Unlock()
	dbtest.Audit(t, db)
}

// pgxExec runs one statement on its own connection to url.
func pgxExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// pgxQueryRow runs one query on its own connection to url and scans its row.
func pgxQueryRow(ctx context.Context, url, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql).Scan(dest...)
}
