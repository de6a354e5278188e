package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestBulkOperationSurvivesKill runs a bulk operation of 5,000 messages in
// a `waybill serve` process, kills it with SIGKILL half-way, and starts
// another: the new process takes the operation up where its journal says
// and finishes it, and every message is acted on exactly once (one event
// carrying the operation's id per message), which the audit proves from
// the journal too.
func TestBulkOperationSurvivesKill(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	bin := buildBinary(t)
	db, dbURL, ns := shared(t)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), DB: db})
	if err != nil {
		t.Fatal(err)
	}
	// A disabled target: the deliveries stay queued for the operation to
	// skip, and nothing else moves them meanwhile.
	if _, err := w.CreateTarget(ctx, lifecycle.Target{Name: "billing", Kind: "file", Enabled: false,
		Config: []byte(`{"dir":"` + t.TempDir() + `"}`)}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateRoute(ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	// Fast enough for the test, slow enough to be killed half-way: about
	// five seconds for the whole.
	if err := w.SetSettings(ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 20},
		Operations: lifecycle.OperationSettings{Rate: 1000}}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var g errgroup.Group
	g.SetLimit(16)
	for range n {
		g.Go(func() error {
			_, _, err := w.Ingest(ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	common := []string{"--database-url", dbURL, "--nats-url", ns.ClientURL()}
	first := startServer(t, bin, append(common, "--data-dir", filepath.Join(dir, "first"))...)
	client := first.adminClient(t, filepath.Join(dir, "first"))
	var op struct {
		ID      uuid.UUID
		Matched int
	}
	client.call("POST", "/operations", map[string]any{"action": "skip", "filter": map[string]any{"source": "erp"},
		"reason": "sent by hand"}, http.StatusAccepted, &op)
	if op.Matched != n {
		t.Fatalf("the operation matched %d messages, want %d", op.Matched, n)
	}
	progress := func() *projection.Operation {
		o, err := projection.LoadOperation(ctx, db, op.ID)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	testpoll.Within(t, 2*time.Minute, fmt.Sprintf("the operation takes %d messages", n/3), func() bool { return progress().Next() >= n/3 })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	killed := progress()
	if killed.State != lifecycle.OperationRunning || killed.Next() >= n {
		t.Fatalf("after the kill: %+v; want it running, half-way", killed)
	}
	t.Logf("killed with %d of %d messages taken", killed.Next(), n)

	startServer(t, bin, append(common, "--data-dir", filepath.Join(dir, "second"))...)
	testpoll.Within(t, 2*time.Minute, "the operation ended after the restart", func() bool {
		return progress().State != lifecycle.OperationRunning
	})
	if o := progress(); o.State != lifecycle.OperationDone || o.Done != n || o.Refused != 0 {
		t.Fatalf("ended %+v", o)
	}

	// Every message acted on exactly once by the operation.
	acted := map[string]int{}
	rows, err := db.Query(ctx, `SELECT stream, count(*) FROM journal WHERE payload->>'operation' = $1 GROUP BY stream`, op.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var (
			stream string
			k      int
		)
		if err := rows.Scan(&stream, &k); err != nil {
			t.Fatal(err)
		}
		acted[stream] = k
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var skipped int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE state = 'skipped'`).Scan(&skipped); err != nil {
		t.Fatal(err)
	}
	twice := 0
	for _, k := range acted {
		if k != 1 {
			twice++
		}
	}
	if len(acted) != n || twice != 0 || skipped != n {
		t.Fatalf("%d messages carry the operation, %d of them more than once; %d deliveries skipped; want %d once each",
			len(acted), twice, skipped, n)
	}
	dbtest.Audit(t, db)
}
