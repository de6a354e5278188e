package workers_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// request is what a receiver got.
type request struct {
	method, path string
	header       http.Header
	body         []byte
}

// TestRetrySendsWhatTheTransformMade: every attempt of a shaped delivery
// sends what the target's transform made when the delivery was made, to
// the path and with the method and headers it said: a retry's body,
// idempotency key and signed content are the first attempt's, though the
// transform changed meanwhile.
func TestRetrySendsWhatTheTransformMade(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var (
		mu  sync.Mutex
		got []request
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, request{r.Method, r.URL.Path, r.Header.Clone(), body})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(receiver.Close)
	cfg, _ := json.Marshal(map[string]string{"url": receiver.URL + "/hooks"})
	noJitter := 0.0
	spec := lifecycle.Target{Name: "billing", Kind: "http", Enabled: true, Config: cfg,
		Retry: lifecycle.RetryPolicy{Strategy: lifecycle.RetryFixed, BaseDelay: lifecycle.Duration(time.Second),
			MaxDelay: lifecycle.Duration(time.Minute), MaxAttempts: 5, MaxAge: lifecycle.Duration(time.Hour), Jitter: &noJitter},
		Transform: `{"payload": {"invoice": message.payload.id}, "path": "/invoices/" + message.payload.id, "method": "PUT",
			"headers": {"X-Tenant": message.headers["x-tenant"]}}`}
	b.target(t, spec)
	keys, err := b.w.TargetKeys(b.ctx, "billing")
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	b.runtime(t, 0)
	in := newMessage(0)
	in.ContentType, in.Payload, in.Headers = "application/json", []byte(`{"id": "in-7"}`), map[string]string{"X-Tenant": "acme"}
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(t, m.Deliveries[0].ID, lifecycle.StateRetrying)
	// A transform changed now shapes only the deliveries made after it.
	spec.Transform = `{"payload": "changed"}`
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	b.waitStatus(t, lifecycle.StatusDelivered, m)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	for i, r := range got {
		if r.method != "PUT" || r.path != "/hooks/invoices/in-7" || string(r.body) != `{"invoice":"in-7"}` ||
			r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Tenant") != "acme" ||
			r.header.Get("Idempotency-Key") != m.Deliveries[0].ID.String() {
			t.Errorf("request %d: %s %s %q %v", i+1, r.method, r.path, r.body, r.header)
		}
		if err := targets.Verify(r.header, r.body, keys[0], b.clock.Now()); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
	}
	first, second := got[0].header, got[1].header
	if first.Get(targets.HeaderWebhookID) != second.Get(targets.HeaderWebhookID) {
		t.Errorf("webhook ids %q and %q", first.Get(targets.HeaderWebhookID), second.Get(targets.HeaderWebhookID))
	}
	b.audit(t)
}
