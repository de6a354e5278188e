package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// panicWriter is a Writer on a fresh database with a target and a route
// from source erp to it.
func panicWriter(t *testing.T) *Writer {
	t.Helper()
	// The panics are logged with their stacks, which the test expects.
	w, err := New(Config{Secrets: dbtest.Secrets(), Base: service.Base{Logger: slog.New(slog.DiscardHandler)}, DB: dbtest.Pool(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := w.CreateTarget(ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateRoute(ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	return w
}

// returns runs f on a goroutine of its own and returns its error, or an
// error of its own when f panics or has not returned within 20 s (a
// wedged Writer).
func returns(f func() error) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- fmt.Errorf("the caller got the panic: %v", v)
			}
		}()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		return errors.New("the command has not returned after 20 s")
	}
}

func ingestTo(w *Writer) func() error {
	return func() error {
		_, _, err := w.Ingest(context.Background(), NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hello")})
		return err
	}
}

// panicking is a command on s whose decision panics.
func panicking(w *Writer, s subject) func() error {
	return func() error {
		_, err := w.run(context.Background(), s, func(*projection.Message, *projection.LaneBook, time.Time) (*change, error) {
			panic("boom")
		})
		return err
	}
}

// wantPanicError fails the test unless err is the error of a panic.
func wantPanicError(t *testing.T, err error) {
	t.Helper()
	var p *panicError
	if !errors.As(err, &p) {
		t.Fatalf("got %v, want the error of a panic", err)
	}
}

// idle fails the test unless every connection goes back to the pool.
func idle(t *testing.T, w *Writer) {
	t.Helper()
	testpoll.Until(t, "every connection back in the pool", func() bool { return w.db.Stat().AcquiredConns() == 0 })
}

// TestPanicFailsItsCommandAlone: a command that panics, in its decision
// or in its batch's write with its message's row locked, and a claim of
// due deliveries that panics in its write, fail with an error; after more panics in a row than the Writer has leaders, its
// connections are back in the pool, no message is held, and commands,
// on the same message too, are written as before.
func TestPanicFailsItsCommandAlone(t *testing.T) {
	t.Parallel()
	w := panicWriter(t)
	m, _, err := w.Ingest(t.Context(), NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	for range maxLeaders + 1 {
		wantPanicError(t, returns(panicking(w, message(m.ID))))
		wantPanicError(t, returns(panicking(w, delivery(m.Deliveries[0].ID))))
		wantPanicError(t, returns(panicking(w, subject{})))
	}
	var armed atomic.Bool
	w.cut = func(point string, _ *pgx.Batch) {
		if point == "appended" && armed.CompareAndSwap(true, false) {
			panic("boom in the write")
		}
	}
	for range maxLeaders + 1 {
		armed.Store(true)
		wantPanicError(t, returns(func() error {
			_, err := w.Skip(context.Background(), m.ID, m.Deliveries[0].ID, Action{Operator: "admin"})
			return err
		}))
		armed.Store(true)
		wantPanicError(t, returns(ingestTo(w)))
		armed.Store(true)
		wantPanicError(t, returns(func() error {
			_, err := w.ClaimDue(context.Background(), "billing", 1, time.Minute)
			return err
		}))
	}
	idle(t, w)
	if err := returns(ingestTo(w)); err != nil {
		t.Fatal(err)
	}
	if err := returns(func() error {
		_, err := w.Claim(context.Background(), m.Deliveries[0].ID, time.Minute)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if claims, err := w.ClaimDue(t.Context(), "billing", 10, time.Minute); err != nil || len(claims) != 1 {
		t.Fatalf("claimed %d due deliveries, want the one of the last ingest: %v", len(claims), err)
	}
	w.batches.mu.Lock()
	defer w.batches.mu.Unlock()
	if w.batches.leaders != 0 || len(w.batches.pending) != 0 || len(w.batches.held) != 0 {
		t.Errorf("left %d leaders, %d pending and %d held", w.batches.leaders, len(w.batches.pending), len(w.batches.held))
	}
}

// TestPanicInABatchLeavesItsOthers: a command that panics in a batch with
// others fails alone; the others are written, and so is what comes after.
func TestPanicInABatchLeavesItsOthers(t *testing.T) {
	t.Parallel()
	w := panicWriter(t)
	m, _, err := w.Ingest(t.Context(), NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	// The first batches wait until the commands after them are queued, so
	// that those are written together.
	var (
		gate    = make(chan struct{})
		started atomic.Int64
		sizes   []int
		sizesMu sync.Mutex
	)
	w.batched = func(n int) {
		sizesMu.Lock()
		sizes = append(sizes, n)
		sizesMu.Unlock()
		if started.Add(1) <= maxLeaders {
			<-gate
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, maxLeaders+8)
	// One at a time: two that arrive together may share a batch, whose
	// leader then holds it at the gate while the other leader hands its
	// lead on, and the second batch never starts.
	for i := range maxLeaders {
		wg.Go(func() { errs[i] = returns(ingestTo(w)) })
		testpoll.Until(t, fmt.Sprintf("batch %d started", i+1), func() bool { return started.Load() >= int64(i+1) })
	}
	var panicked error
	wg.Go(func() { panicked = returns(panicking(w, message(m.ID))) })
	for i := maxLeaders; i < len(errs); i++ {
		wg.Go(func() { errs[i] = returns(ingestTo(w)) })
	}
	testpoll.Until(t, fmt.Sprintf("%d commands queued", len(errs)-maxLeaders+1), func() bool { return w.Pending() >= len(errs)-maxLeaders+1 })
	close(gate)
	wg.Wait()
	wantPanicError(t, panicked)
	for i, err := range errs {
		if err != nil {
			t.Errorf("ingest %d: %v", i, err)
		}
	}
	sizesMu.Lock()
	shared := false
	for _, n := range sizes {
		shared = shared || n > 1
	}
	sizesMu.Unlock()
	if !shared {
		t.Fatalf("no batch held more than one command: %v", sizes)
	}
	idle(t, w)
	if err := returns(ingestTo(w)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Claim(t.Context(), m.Deliveries[0].ID, time.Minute); err != nil {
		t.Fatal(err)
	}
}
