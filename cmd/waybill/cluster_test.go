package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/workers"
)

// TestTwoProcessesOneKilled runs two servers on one PostgreSQL and one
// NATS. A target created through the first reaches the second at once;
// messages ingested through the second are worked by both; the first is
// killed with SIGKILL halfway, and once its leases have run out (the test
// sweeps with its clock past them) the second finishes everything: each
// message delivered, each delivery recorded delivered once, the audit clean.
func TestTwoProcessesOneKilled(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildBinary(t)
	db, dbURL, ns := shared(t)

	var (
		mu  sync.Mutex
		hit = map[string]int{}
	)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		hit[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	}))
	defer sink.Close()
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(hit)
	}

	dir := t.TempDir()
	common := []string{"--database-url", dbURL, "--nats-url", ns.ClientURL()}
	first := startServer(t, bin, append(common, "--data-dir", filepath.Join(dir, "first"))...)
	second := startServer(t, bin, append(common, "--data-dir", filepath.Join(dir, "second"))...)
	viaFirst := first.adminClient(t, filepath.Join(dir, "first"))
	viaSecond := second.client(t, viaFirst.token)

	viaFirst.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "enabled": true,
		"max_concurrent": 4, "config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	viaFirst.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)

	const n = 300
	var ids []string
	for i := range n {
		var m struct{ ID string }
		viaSecond.call("POST", "/messages", map[string]any{"source": "erp", "from": "a", "to": "b",
			"payload": fmt.Sprintf("m%d", i)}, http.StatusCreated, &m)
		ids = append(ids, m.ID)
	}
	testpoll.Until(t, fmt.Sprintf("%d of %d delivered", n/3, n), func() bool { return received() >= n/3 })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()

	// Past the dead process's leases, as the second's sweep would be a
	// lease later. The sweep runs until everything is delivered: a batch
	// the dead process had sent may still commit a claim after the kill.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lease := lifecycle.Target{AttemptTimeout: lifecycle.Duration(lifecycle.DefaultAttemptTimeout)}.Lease()
	clock := testclock.New(time.Now())
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: clock.Now}, DB: db, Notifier: workers.NewPublisher(nc, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := sweep.New(sweep.Config{Base: service.Base{Now: clock.Now, Logger: slog.New(slog.DiscardHandler)}, Writer: w, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Within(t, 2*time.Minute, "every message delivered after the kill", func() bool {
		clock.Advance(time.Since(clock.Now()) + lease + time.Second)
		if _, err := sw.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		var open int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM messages WHERE status <> 'delivered'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0
	})
	for _, id := range ids {
		var m struct{ Status string }
		viaSecond.call("GET", "/messages/"+id, nil, http.StatusOK, &m)
		if m.Status != "delivered" {
			t.Errorf("message %s is %s over the API", id, m.Status)
		}
	}
	var delivered int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM journal WHERE kind = $1 AND payload->'outcome'->>'kind' = 'delivered'`,
		journal.KindDeliveryAttempted).Scan(&delivered); err != nil {
		t.Fatal(err)
	}
	if delivered != n {
		t.Fatalf("%d deliveries recorded delivered, want %d once each", delivered, n)
	}
	dbtest.Audit(t, db)
}
