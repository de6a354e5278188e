package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/testlog"
	"github.com/waybill/waybill/internal/testpoll"
)

// TestOnlineRebuildBesideAServer runs `waybill rebuild --online` beside a
// server under steady ingest. Runs killed with SIGKILL while paused in
// the fold, the catch-up and the switch leave the live tables in place
// (the same tables, the server serving); a second run beside a paused one
// refuses, naming it; a run to the end switches the tables in. No request
// fails, every message is delivered once, the audit is clean, and the
// tables equal what an offline rebuild makes of the journal.
func TestOnlineRebuildBesideAServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildBinary(t)
	db, dbURL, ns := shared(t)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	dir := t.TempDir()
	s := startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", dir)
	admin := s.adminClient(t, dir)
	admin.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "enabled": true,
		"config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	admin.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)

	var (
		acked   atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for n := 0; !stopped.Load(); n++ {
			key := fmt.Sprint(n)
			body, _ := json.Marshal(map[string]any{"source": "erp", "from": "a", "to": "b", "payload": key, "idempotency_key": key})
			req, _ := http.NewRequest("POST", admin.base+"/messages", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+admin.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("ingest %s: %v", key, err)
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("ingest %s: %d %s", key, resp.StatusCode, data)
				return
			}
			acked.Add(1)
		}
	})
	defer func() {
		stopped.Store(true)
		wg.Wait()
	}()
	moved := func(what string) {
		t.Helper()
		from := acked.Load()
		testpoll.Until(t, "ingest under way "+what, func() bool { return acked.Load() >= from+30 || t.Failed() })
	}
	moved("before")

	live := tableOIDs(t, db)
	rebuild := func(pause string) (*exec.Cmd, *testlog.Buffer) {
		cmd := exec.Command(bin, "rebuild", "--online", "--database-url", dbURL)
		out := &testlog.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = append(os.Environ(), pauseEnv+"="+pause)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	for _, phase := range []string{"fold", "catch_up", "switch"} {
		cmd, out := rebuild(phase)
		testpoll.Until(t, "the rebuild paused in "+phase, func() bool { return strings.Contains(out.String(), "paused in "+phase) })
		if phase == "catch_up" {
			second, err := exec.Command(bin, "rebuild", "--online", "--database-url", dbURL).CombinedOutput()
			if err == nil || !strings.Contains(string(second), "an online rebuild is running on this database (PostgreSQL backend") {
				t.Errorf("a second rebuild beside one paused: %v\n%s", err, second)
			}
		}
		if phase != "switch" {
			// The switch holds the live tables: ingest waits for it.
			moved("with the rebuild paused in " + phase)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		moved("after the rebuild was killed in " + phase)
		if now := tableOIDs(t, db); now != live {
			t.Fatalf("the live tables changed by a rebuild killed in %s", phase)
		}
	}

	out, err := exec.Command(bin, "rebuild", "--online", "--database-url", dbURL).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "; 0 violations") || !strings.Contains(string(out), "lock_held=") {
		t.Fatalf("online rebuild: %v\n%s", err, out)
	}
	if now := tableOIDs(t, db); now == live {
		t.Fatal("the online rebuild left the live tables in place")
	}
	moved("after the switch")
	stopped.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	waitEveryMessageDelivered(t, db)
	audit(t, bin, dbURL)
	before := projectionRows(t, db)
	stopServer(t, s)
	if out, err := exec.Command(bin, "rebuild", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("offline rebuild: %v\n%s", err, out)
	}
	after := projectionRows(t, db)
	if before != after {
		t.Fatalf("the tables after the online rebuild differ from an offline rebuild's:\nonline  %.2000s\noffline %.2000s", before, after)
	}
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM messages`).Scan(&n); err != nil || n != acked.Load() {
		t.Fatalf("%d messages stored (%v), %d acknowledged", n, err, acked.Load())
	}
}

// tableOIDs names the live projection tables by their ids: a switch
// replaces them.
func tableOIDs(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := db.QueryRow(t.Context(), `SELECT string_agg(c.oid::text, ',' ORDER BY c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname IN ('messages', 'deliveries', 'lanes', 'target_health', 'delivery_counts')`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// projectionRows is the rows of messages and deliveries as text, and the
// delivery counts summed over their shards, in a stable order.
func projectionRows(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := db.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(r::text, E'\n' ORDER BY r.id) FROM messages r),
		(SELECT string_agg(r::text, E'\n' ORDER BY r.id) FROM deliveries r),
		(SELECT string_agg(format('%s %s %s', target, state, n), E'\n' ORDER BY target, state)
			FROM (SELECT target, state, sum(n) AS n FROM delivery_counts GROUP BY 1, 2 HAVING sum(n) <> 0) c))`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServeWaitsForItsProjections starts a server on a database whose
// projections are of an older version than its build's, as after an
// upgrade: it answers 503 with Retry-After, naming `waybill rebuild
// --online`, and readyz is unready, until an online rebuild of its build
// makes the projections its own; then it serves.
func TestServeWaitsForItsProjections(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db, dbURL, ns := shared(t)
	if _, err := db.Exec(t.Context(), `UPDATE schema_version SET version = version - 1 WHERE part = 'projections'`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := launchServer(t, bin, nil, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", dir)
	var body string
	testpoll.Until(t, "the server answering 503", func() bool {
		resp, err := http.Post("http://"+s.addr+"/api/v1/messages", "application/json", strings.NewReader(`{}`))
		if err != nil {
			return false
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("answered %d (Retry-After %q): %s", resp.StatusCode, resp.Header.Get("Retry-After"), data)
		}
		body = string(data)
		return true
	})
	if !strings.Contains(body, "waybill rebuild --online") || !strings.Contains(body, `"code":"UNAVAILABLE"`) {
		t.Fatalf("503 body: %s", body)
	}
	if resp, err := http.Get("http://" + s.addr + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz while waiting: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if out, err := exec.Command(bin, "rebuild", "--online", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("online rebuild: %v\n%s", err, out)
	}
	waitReady(t, "http://"+s.addr+"/readyz")
	admin := s.adminClient(t, dir)
	admin.call("POST", "/messages", map[string]any{"source": "erp", "from": "a", "to": "b", "payload": "x"}, http.StatusCreated, nil)
	stopServer(t, s)
}
