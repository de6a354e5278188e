package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
)

// TestRollingRestartLosesNothing restarts three servers on one PostgreSQL
// and one NATS one at a time while two clients ingest through them, each
// sending only to the servers a prober finds ready, as a load balancer
// would. No request fails (a 503 would have to carry Retry-After, and
// none is expected), every acknowledged message is delivered once, in
// less than a lease, and the audit is clean.
func TestRollingRestartLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildBinary(t)
	db, dbURL, ns := shared(t)

	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(2 * time.Millisecond)
	}))
	defer sink.Close()

	dir := t.TempDir()
	start := func(i int) *server {
		return startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(),
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--shutdown-delay", "1s", "--drain-grace", "1s")
	}
	var (
		mu      sync.Mutex
		servers []*server
		ready   = map[string]bool{}
	)
	for i := range 3 {
		s := start(i)
		servers = append(servers, s)
		ready[s.addr] = true
	}
	admin := servers[0].adminClient(t, filepath.Join(dir, "0"))
	admin.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "enabled": true,
		"max_concurrent": 4, "config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	admin.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)

	// The prober is the load balancer's view: a server takes requests
	// from the first /readyz that answers 200 to the first that does not.
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !done.Load() {
			mu.Lock()
			addrs := make([]string, len(servers))
			for i, s := range servers {
				addrs[i] = s.addr
			}
			mu.Unlock()
			for _, addr := range addrs {
				resp, err := http.Get("http://" + addr + "/readyz")
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					resp.Body.Close()
				}
				mu.Lock()
				ready[addr] = ok
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	pick := func(n int) string {
		mu.Lock()
		defer mu.Unlock()
		var up []string
		for _, s := range servers {
			if ready[s.addr] {
				up = append(up, s.addr)
			}
		}
		if len(up) == 0 {
			return ""
		}
		return up[n%len(up)]
	}

	var (
		ackMu sync.Mutex
		acked = map[string]string{} // idempotency key → message id
	)
	ingest := func(client, n int) {
		key := fmt.Sprintf("c%d-%d", client, n)
		body, _ := json.Marshal(map[string]any{"source": "erp", "from": "a", "to": "b", "payload": key, "idempotency_key": key})
		for try := 0; ; try++ {
			addr := pick(n + try)
			if addr == "" {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			req, _ := http.NewRequest("POST", "http://"+addr+"/api/v1/messages", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+admin.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("ingest %s through %s: %v", key, addr, err)
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK:
				var m struct{ ID string }
				if err := json.Unmarshal(data, &m); err != nil {
					t.Errorf("ingest %s: %v", key, err)
					return
				}
				ackMu.Lock()
				acked[key] = m.ID
				ackMu.Unlock()
				return
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				t.Logf("ingest %s through %s: 503, tried again", key, addr)
			default:
				t.Errorf("ingest %s through %s: %d %s", key, addr, resp.StatusCode, data)
				return
			}
		}
	}
	for c := range 2 {
		wg.Go(func() {
			for n := 0; !done.Load(); n++ {
				ingest(c, n)
			}
		})
	}
	count := func() int {
		ackMu.Lock()
		defer ackMu.Unlock()
		return len(acked)
	}

	for i := range 3 {
		before := count()
		testpoll.Until(t, "ingest under way", func() bool { return count() >= before+50 })
		mu.Lock()
		old := servers[i]
		mu.Unlock()
		stopServer(t, old)
		s := start(i)
		mu.Lock()
		servers[i] = s
		mu.Unlock()
	}
	before := count()
	testpoll.Until(t, "ingest under way after the restarts", func() bool { return count() >= before+50 })
	done.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}

	// Within testpoll's minute, less than a lease (two minutes): nothing
	// waited for one to end.
	waitEveryMessageDelivered(t, db)
	var messages, delivered int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM messages),
		(SELECT count(*) FROM journal WHERE kind = $1 AND payload->'outcome'->>'kind' = 'delivered')`,
		journal.KindDeliveryAttempted).Scan(&messages, &delivered); err != nil {
		t.Fatal(err)
	}
	if n := count(); messages != n || delivered != n {
		t.Fatalf("%d acknowledged, %d messages stored, %d delivered: want all equal", n, messages, delivered)
	}
	dbtest.Audit(t, db)
}

// waitEveryMessageDelivered waits, within testpoll's minute, until every
// message of db is delivered.
func waitEveryMessageDelivered(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	waitEveryMessageDeliveredWithin(t, db, time.Minute)
}

// waitEveryMessageDeliveredWithin is waitEveryMessageDelivered with a
// wait of its own length.
func waitEveryMessageDeliveredWithin(t *testing.T, db *pgxpool.Pool, within time.Duration) {
	t.Helper()
	testpoll.Within(t, within, "every message delivered", func() bool {
		var open int
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM messages WHERE status <> 'delivered'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0
	})
}
