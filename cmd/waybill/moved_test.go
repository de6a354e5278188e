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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/schema"
)

// buildNewerBinary builds waybill as a build of the next projections
// version would be: the same model under a higher version, as after an
// upgrade that changed it.
func buildNewerBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "waybill-newer")
	flag := fmt.Sprintf("-X github.com/waybill/waybill/schema.builtProjections=%d", schema.ProjectionVersion+1)
	out, err := exec.Command("go", "build", "-ldflags", flag, "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("build the newer waybill: %v\n%s", err, out)
	}
	return bin
}

// TestOldServerStopsWritingAfterTheSwitch runs a newer build's `waybill
// rebuild --online` beside a server of this build under steady ingest.
// Every ingest is answered 201 or, from the switch on, 503 with
// Retry-After; the server then turns unready and answers every request
// 503, and writes nothing more: the journal and the tables are as the
// switch left them, every acknowledged message is there, and the audit is
// clean.
func TestOldServerStopsWritingAfterTheSwitch(t *testing.T) {
	bin := buildBinary(t)
	newer := buildNewerBinary(t)
	db, dbURL, ns := shared(t)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	dir := t.TempDir()
	s := startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", dir)
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := &api{t: t, base: "http://" + s.addr + "/api/v1", token: strings.TrimSpace(string(token))}
	admin.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "enabled": true,
		"config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	admin.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)

	ingest := func(key string) (int, string, []byte) {
		body, _ := json.Marshal(map[string]any{"source": "erp", "from": "a", "to": "b", "payload": key, "idempotency_key": key})
		req, _ := http.NewRequest("POST", admin.base+"/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("ingest %s: %v", key, err)
			return 0, "", nil
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), data
	}
	var (
		acked, refused atomic.Int64
		stopped        atomic.Bool
		wg             sync.WaitGroup
	)
	wg.Go(func() {
		for n := 0; !stopped.Load(); n++ {
			status, retry, data := ingest(fmt.Sprint(n))
			switch {
			case status == http.StatusCreated && refused.Load() == 0:
				acked.Add(1)
			case status == http.StatusServiceUnavailable && retry != "":
				refused.Add(1)
			default:
				t.Errorf("ingest %d: %d (Retry-After %q) %s, after %d refused", n, status, retry, data, refused.Load())
				return
			}
		}
	})
	defer func() {
		stopped.Store(true)
		wg.Wait()
	}()
	testpoll.Until(t, "ingest under way", func() bool { return acked.Load() >= 30 || t.Failed() })

	out, err := exec.Command(newer, "rebuild", "--online", "--database-url", dbURL).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "; 0 violations") {
		t.Fatalf("online rebuild of the newer build: %v\n%s", err, out)
	}
	written := writtenState(t, db)
	testpoll.Until(t, "ingest refused", func() bool { return refused.Load() > 0 || t.Failed() })
	testpoll.Until(t, "the old server's loops stopped", func() bool {
		return strings.Contains(s.logs.String(), "every loop stopped: answering 503")
	})
	stopped.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}
	if resp, err := http.Get("http://" + s.addr + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz of the old server after the switch: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Any request, a configuration change too, is answered so.
	req, _ := http.NewRequest("POST", admin.base+"/routes", strings.NewReader(`{"source":"x","from":"*","to":"*","target":"sink"}`))
	req.Header.Set("Authorization", "Bearer "+admin.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(data), "UNAVAILABLE") {
		t.Fatalf("a route created on the old server after the switch: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), data)
	}
	if now := writtenState(t, db); now != written {
		t.Fatalf("the old server wrote after the switch:\nat the switch %.1000s\nnow          %.1000s", written, now)
	}
	var n int64
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM messages`).Scan(&n); err != nil || n != acked.Load() {
		t.Fatalf("%d messages stored (%v), %d acknowledged", n, err, acked.Load())
	}
	audit(t, newer, dbURL)
	stopServer(t, s)
}

// writtenState is what a server writes: the journal's last position and
// the projection rows.
func writtenState(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	var last int64
	if err := db.QueryRow(t.Context(), `SELECT coalesce(max(position), 0) FROM journal`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("journal at %d\n%s", last, projectionRows(t, db))
}
