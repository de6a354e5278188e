package workers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// callbackSink receives the callbacks and answers with the status the
// test sets.
type callbackSink struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	keys   []string
	status int
	// retryAfter, when set, is the answers' Retry-After.
	retryAfter string
}

func newCallbackSink(t *testing.T) *callbackSink {
	s := &callbackSink{status: http.StatusNoContent}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(data, &body)
		s.mu.Lock()
		s.bodies = append(s.bodies, body)
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		status, retryAfter := s.status, s.retryAfter
		s.mu.Unlock()
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *callbackSink) got() ([]map[string]any, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.bodies...), append([]string(nil), s.keys...)
}

// callbacks starts the Callbacks on the bundle, looking every 10 ms.
func (b *bundle) callbacks(t *testing.T, reg prometheus.Registerer) *workers.Callbacks {
	t.Helper()
	c, err := workers.NewCallbacks(workers.CallbackConfig{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w,
		Interval: 10 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	return c
}

func (b *bundle) callbackState(t *testing.T, m *projection.Message) *projection.Callback {
	t.Helper()
	return b.load(t, m.ID).Callback
}

// TestCallbacks: a message with a callback URL is called back with its
// outcome once it settles, and again when it settles again after a
// redelivery, each settlement with its own idempotency key.
func TestCallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cbs := newCallbackSink(t)
	b.target(t, b.httpTarget("web"))
	b.runtime(t, 0)
	reg := prometheus.NewRegistry()
	b.callbacks(t, reg)
	in := newMessage(1)
	in.CallbackURL = cbs.URL + "/outcome"
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the callback", func() bool { cb := b.callbackState(t, m); return cb.State == lifecycle.StateDelivered })
	bodies, keys := cbs.got()
	if len(bodies) != 1 || keys[0] != m.ID.String()+"/1" {
		t.Fatalf("callbacks %v %v", bodies, keys)
	}
	body := bodies[0]
	ds, _ := body["deliveries"].([]any)
	if body["message_id"] != m.ID.String() || body["status"] != "delivered" || len(ds) != 1 || body["at"] == nil {
		t.Fatalf("callback body %v", body)
	}
	if d := ds[0].(map[string]any); d["target"] != "web" || d["state"] != "delivered" || d["last_error"] != nil {
		t.Fatalf("callback delivery %v", d)
	}

	m = b.load(t, m.ID)
	if _, err := b.w.Redeliver(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the second callback", func() bool {
		cb := b.callbackState(t, m)
		return cb.Seq == 2 && cb.State == lifecycle.StateDelivered
	})
	if _, keys := cbs.got(); len(keys) != 2 || keys[1] != m.ID.String()+"/2" {
		t.Fatalf("keys %v", keys)
	}
	// The worker counts a call once its outcome is recorded: after the
	// state the poll above saw.
	delivered := func() float64 {
		families, _ := reg.Gather()
		for _, f := range families {
			for _, s := range f.GetMetric() {
				if f.GetName() == "waybill_callbacks_total" && s.GetLabel()[0].GetValue() == "delivered" {
					return s.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	testpoll.Until(t, "waybill_callbacks_total{outcome=delivered} at 2", func() bool { return delivered() >= 2 })
	if n := delivered(); n != 2 {
		t.Errorf("waybill_callbacks_total{outcome=delivered} = %v, want 2", n)
	}
	b.audit(t)
}

// TestCallbackThatKeepsFailing is retried with back-off and, at
// callback_max_attempts, fails for good; the message keeps its status.
func TestCallbackThatKeepsFailing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cbs := newCallbackSink(t)
	cbs.status = http.StatusServiceUnavailable
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 5},
		CallbackMaxAttempts: 2}, admin); err != nil {
		t.Fatal(err)
	}
	b.callbacks(t, nil)
	// Nothing routes it: it settles at once, not routed.
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "nowhere", From: "a", To: "b", Payload: []byte("x"),
		CallbackURL: cbs.URL})
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the first call", func() bool { return b.callbackState(t, m).State == lifecycle.StateRetrying })
	cb := b.callbackState(t, m)
	if wait := cb.NextDue.Sub(b.clock.Now()); wait < 8*time.Second || wait > 12*time.Second || !strings.HasPrefix(cb.LastError, "503") {
		t.Fatalf("after the first call: due in %s, %q", wait, cb.LastError)
	}
	b.clock.Advance(time.Minute)
	testpoll.Until(t, "the last call", func() bool { return b.callbackState(t, m).State == lifecycle.StateFailed })
	cb = b.callbackState(t, m)
	if !strings.HasSuffix(cb.LastError, "gave up after call 2: callback_max_attempts is 2") || cb.Attempts != 2 {
		t.Fatalf("after the last call: %+v", cb)
	}
	if bodies, _ := cbs.got(); len(bodies) != 2 {
		t.Errorf("%d calls", len(bodies))
	}
	if got := b.load(t, m.ID); got.Status != lifecycle.StatusNotRouted {
		t.Errorf("status %s", got.Status)
	}
	b.audit(t)
}

// TestCallbackRetryAfterReadsTheClock: a callback answered 503 with a
// Retry-After is due when the header says, read against the process's
// clock (days from the machine's here), not the machine's.
func TestCallbackRetryAfterReadsTheClock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header string
		wait         time.Duration
	}{
		{"seconds", "600", 10 * time.Minute},
		{"HTTP-date", "", 30 * time.Minute}, // the header is the clock's time + 30 min
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cbs := newCallbackSink(t)
			cbs.status = http.StatusServiceUnavailable
			cbs.retryAfter = tt.header
			if tt.header == "" {
				cbs.retryAfter = b.clock.Now().Add(tt.wait).Format(http.TimeFormat)
			}
			b.callbacks(t, nil)
			m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "nowhere", From: "a", To: "b", Payload: []byte("x"),
				CallbackURL: cbs.URL})
			if err != nil {
				t.Fatal(err)
			}
			testpoll.Until(t, "the first call", func() bool { return b.callbackState(t, m).State == lifecycle.StateRetrying })
			if due := b.callbackState(t, m).NextDue; !due.Equal(b.clock.Now().Add(tt.wait)) {
				t.Errorf("due %v, want %v", due, b.clock.Now().Add(tt.wait))
			}
		})
	}
}
