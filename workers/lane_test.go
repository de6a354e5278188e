package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/workers"
)

// laneSink takes messages whose payload is "<key> <n>", answers after a
// random pause and now and then 503, and records for each key the order in
// which the numbers arrived and whether two of a key were ever in flight
// at once.
type laneSink struct {
	mu       sync.Mutex
	got      map[string][]int
	inFlight map[string]int
	overlap  []string
}

func (s *laneSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key, n, _ := strings.Cut(string(body), " ")
	s.mu.Lock()
	s.inFlight[key]++
	if s.inFlight[key] > 1 {
		s.overlap = append(s.overlap, key)
	}
	s.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	status := http.StatusOK
	if rand.IntN(5) == 0 {
		status = http.StatusServiceUnavailable
	}
	s.mu.Lock()
	s.inFlight[key]--
	if status == http.StatusOK {
		i, _ := strconv.Atoi(n)
		s.got[key] = append(s.got[key], i)
	}
	s.mu.Unlock()
	w.WriteHeader(status)
}

// TestLanesDeliverInOrderAcrossProcesses runs two runtimes, as two
// processes, on a fifo target whose sink fails now and then: every key's
// messages arrive one at a time, each once, in the order they were
// ingested, while the keys run side by side; the audit is clean.
func TestLanesDeliverInOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := &laneSink{got: map[string][]int{}, inFlight: map[string]int{}}
	srv := httptest.NewServer(sink)
	t.Cleanup(srv.Close)
	cfg, _ := json.Marshal(map[string]string{"url": srv.URL})
	spec := lifecycle.Target{Name: "ordered", Kind: "http", Enabled: true, Config: cfg, MaxConcurrent: 8,
		Retry:    lifecycle.RetryPolicy{BaseDelay: lifecycle.Duration(5 * time.Millisecond), MaxDelay: lifecycle.Duration(20 * time.Millisecond)},
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO},
		// No breaker: a run of the sink's random 503s can trip the default
		// one (half of 10 requests), whose cooldown outlasts the test.
		Health: &lifecycle.Health{}}
	b.target(t, spec)
	real := time.Now
	var ws []*commands.Writer
	for range 2 {
		w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Logger: quiet}, DB: b.db,
			Notifier: workers.NewPublisher(b.nc, nil, b.metrics)})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Now: real, Logger: quiet}, Writer: w, NATS: b.nc,
			DrainGrace: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Stop(context.Background()) })
		ws = append(ws, w)
	}
	// The sweep wakes retries when they are due; its clock is real too.
	sw, err := sweep.New(sweep.Config{Base: service.Base{Now: real, Logger: quiet}, Writer: ws[0], DB: b.db,
		Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Stop(context.Background()) })

	const keys, each = 6, 15
	var ms []*projection.Message
	for n := range each {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			m, _, err := ws[(n+k)%2].Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b",
				ContentType: "text/plain", Payload: fmt.Appendf(nil, "%s %d", key, n), OrderingKey: key})
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
	}
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.overlap) > 0 {
		t.Errorf("two of a key in flight at once: %v", sink.overlap)
	}
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		got := sink.got[key]
		if len(got) != each {
			t.Errorf("%s: %d arrived, want %d: %v", key, len(got), each, got)
			continue
		}
		for i, n := range got {
			if n != i {
				t.Errorf("%s arrived in the order %v", key, got)
				break
			}
		}
	}
	b.audit(t)
}

// TestABusyLaneLetsOthersHaveTheSlot: with one slot, a lane whose next
// delivery is always ready does not keep the slot from a delivery of
// another lane whose wake-up came first: an outcome claims no lane's next
// while a wake-up waits for the slot, so the next joins the queue behind it.
func TestABusyLaneLetsOthersHaveTheSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived, release := make(chan string, 100), make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		arrived <- string(body)
		<-release
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	cfg, _ := json.Marshal(map[string]string{"url": srv.URL})
	b.target(t, lifecycle.Target{Name: "ordered", Kind: "http", Enabled: true, Config: cfg, Slots: 1,
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}})
	b.runtime(t, time.Millisecond)
	ingest := func(key string, i int) {
		t.Helper()
		if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", ContentType: "text/plain",
			Payload: fmt.Appendf(nil, "%s %d", key, i), OrderingKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	ingest("a", 0)
	if got := <-arrived; got != "a 0" {
		t.Fatalf("first attempt %q", got)
	}
	ingest("b", 0)
	for i := 1; i <= 10; i++ {
		ingest("a", i)
		release <- struct{}{}
		if got := <-arrived; got == "b 0" {
			// Mid-way: b 0 in flight, lane a's next woken or waiting.
			b.audit(t)
			return
		}
	}
	t.Fatal("the other lane's delivery waited behind ten of the busy lane's")
}
