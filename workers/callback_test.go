package workers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
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
	"github.com/waybill/waybill/targets"
	"github.com/waybill/waybill/workers"
)

// callbackSink receives the callbacks and answers with the status the
// test sets.
type callbackSink struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	keys   []string
	// calls are the requests as received, for their signatures.
	calls  []signedCall
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
		s.calls = append(s.calls, signedCall{r.Header.Clone(), data})
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

// signedCall is a request a sink received.
type signedCall struct {
	header http.Header
	body   []byte
}

func (s *callbackSink) received() []signedCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]signedCall(nil), s.calls...)
}

func (s *callbackSink) got() ([]map[string]any, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.bodies...), append([]string(nil), s.keys...)
}

// callbacks starts the Callbacks on the bundle, looking every 10 ms,
// allowed to call the sinks on loopback (callbacks.allowed_networks).
func (b *bundle) callbacks(t *testing.T, reg prometheus.Registerer) *workers.Callbacks {
	t.Helper()
	s, err := b.w.Settings(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Callbacks.AllowedNetworks = []string{"127.0.0.0/8", "::1/128"}
	if err := b.w.SetSettings(b.ctx, s, admin); err != nil {
		t.Fatal(err)
	}
	return b.startCallbacks(t, reg)
}

// startCallbacks starts the Callbacks on the bundle, looking every 10 ms,
// under the settings as they are.
func (b *bundle) startCallbacks(t *testing.T, reg prometheus.Registerer) *workers.Callbacks {
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

// TestCallbackShowsAnAnswerByItsCode: a callback says what a target
// answered by its code alone, as the API shows it to a sender: the sender
// chose where the call goes.
func TestCallbackShowsAnAnswerByItsCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cbs := newCallbackSink(t)
	b.target(t, b.httpTarget("web"))
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int { return http.StatusBadRequest })
	b.runtime(t, 0)
	b.callbacks(t, nil)
	in := newMessage(1)
	in.CallbackURL = cbs.URL + "/outcome"
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the callback", func() bool { return b.callbackState(t, m).State == lifecycle.StateDelivered })
	bodies, _ := cbs.got()
	if ds, _ := bodies[0]["deliveries"].([]any); len(ds) != 1 || ds[0].(map[string]any)["last_error"] != "HTTP 400" {
		t.Fatalf("callback %v", bodies[0])
	}
	if got := b.load(t, m.ID).Deliveries[0].LastError; got != "400 Bad Request" {
		t.Errorf("the delivery's own error %q", got)
	}
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

// TestCallbackToARefusedAddress: a call is checked when it dials, after
// the name is resolved: an address in a special range that
// callbacks.allowed_networks does not list fails the call, naming the
// setting, to be retried, and nothing reaches the listener. The messages
// are stored through the Writer, which does not look at the URL's host
// (the API refuses these at ingest), as a name that resolved elsewhere
// then would be.
func TestCallbackToARefusedAddress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cbs := newCallbackSink(t)
	var ms []*projection.Message
	for _, url := range []string{cbs.URL, strings.Replace(cbs.URL, "127.0.0.1", "localhost", 1)} {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "nowhere", From: "a", To: "b", Payload: []byte("x"), CallbackURL: url})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	b.startCallbacks(t, nil)
	for _, m := range ms {
		testpoll.Until(t, "the refused call", func() bool { return b.callbackState(t, m).State == lifecycle.StateRetrying })
		cb := b.callbackState(t, m)
		if !strings.Contains(cb.LastError, "is a loopback address") || !strings.Contains(cb.LastError, "callbacks.allowed_networks") ||
			cb.Attempts != 1 {
			t.Errorf("%s: %+v", cb.URL, cb)
		}
	}
	if bodies, _ := cbs.got(); len(bodies) != 0 {
		t.Errorf("the listener got %d calls", len(bodies))
	}
	b.audit(t)
}

// TestCallbackHostsAndRedirects: a host outside callbacks.allowed_hosts
// fails its call naming the setting, to be retried, and a redirect is
// the call's answer, which fails the callback, never followed; a Location
// of megabytes is cut in the callback's error.
func TestCallbackHostsAndRedirects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cbs := newCallbackSink(t)
	redirect := httptest.NewServer(http.RedirectHandler(cbs.URL+"/followed", http.StatusFound))
	t.Cleanup(redirect.Close)
	far := httptest.NewServer(http.RedirectHandler(cbs.URL+"/"+strings.Repeat("x", 2<<20), http.StatusFound))
	t.Cleanup(far.Close)
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Callbacks: lifecycle.CallbackSettings{
		AllowedNetworks: []string{"127.0.0.0/8", "::1/128"}, AllowedHosts: []string{"127.0.0.1"}}}, admin); err != nil {
		t.Fatal(err)
	}
	b.startCallbacks(t, nil)
	called := func(url string, state lifecycle.DeliveryState) *projection.Callback {
		t.Helper()
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "nowhere", From: "a", To: "b", Payload: []byte("x"), CallbackURL: url})
		if err != nil {
			t.Fatal(err)
		}
		testpoll.Until(t, "the call of "+url, func() bool { return b.callbackState(t, m).State == state })
		return b.callbackState(t, m)
	}
	if cb := called(strings.Replace(cbs.URL, "127.0.0.1", "localhost", 1), lifecycle.StateRetrying); !strings.Contains(cb.LastError, "callbacks.allowed_hosts") ||
		cb.Attempts != 1 {
		t.Errorf("a host not allowed: %+v", cb)
	}
	if cb := called(redirect.URL, lifecycle.StateFailed); !strings.HasPrefix(cb.LastError, "302 Found to "+cbs.URL+"/followed") {
		t.Errorf("a redirect: %+v", cb)
	}
	if cb := called(far.URL, lifecycle.StateFailed); !strings.HasPrefix(cb.LastError, "302 Found to "+cbs.URL+"/xxx") ||
		len(cb.LastError) > 2048 || !strings.Contains(cb.LastError, lifecycle.CutMark) {
		t.Errorf("a redirect of megabytes: %d bytes, %.200q", len(cb.LastError), cb.LastError)
	}
	if bodies, _ := cbs.got(); len(bodies) != 0 {
		t.Errorf("the listener got %d calls", len(bodies))
	}
	b.audit(t)
}

// TestCallbacksAreSigned: every call carries the Standard Webhooks
// headers, its webhook-id the same on every call of a settlement, signed
// by both keys during a rotation's grace and by the new one alone after
// it, read by the process's clock.
func TestCallbacksAreSigned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cbs := newCallbackSink(t)
	cbs.status = http.StatusServiceUnavailable
	b.callbacks(t, nil)
	first, err := b.w.OwnKeys(b.ctx, lifecycle.KeyOwnerCallbacks)
	if err != nil || len(first) != 1 {
		t.Fatalf("the callbacks' key, made at the start: %+v, %v", first, err)
	}
	second, err := b.w.RotateOwnKey(b.ctx, lifecycle.KeyOwnerCallbacks, 30*time.Second, "", admin)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "nowhere", From: "a", To: "b", Payload: []byte("x"),
		CallbackURL: cbs.URL})
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the first call", func() bool { return len(cbs.received()) == 1 })
	call := cbs.received()[0]
	id := m.ID.String() + "/1"
	if call.header.Get(targets.HeaderWebhookID) != id || len(strings.Fields(call.header.Get(targets.HeaderWebhookSignature))) != 2 {
		t.Fatalf("the first call's headers %v", call.header)
	}
	for _, k := range []targets.Key{first[0], second} {
		if err := targets.Verify(call.header, call.body, k, b.clock.Now()); err != nil {
			t.Fatalf("during the grace: %v", err)
		}
	}
	changed := append([]byte(nil), call.body...)
	changed[len(changed)-2]++
	if targets.Verify(call.header, changed, second, b.clock.Now()) == nil {
		t.Fatal("a body changed by one byte verifies")
	}

	testpoll.Until(t, "the retry recorded", func() bool { return b.callbackState(t, m).State == lifecycle.StateRetrying })
	b.clock.Advance(time.Minute)
	testpoll.Until(t, "the second call", func() bool { return len(cbs.received()) == 2 })
	call = cbs.received()[1]
	if call.header.Get(targets.HeaderWebhookID) != id || len(strings.Fields(call.header.Get(targets.HeaderWebhookSignature))) != 1 ||
		targets.Verify(call.header, call.body, second, b.clock.Now()) != nil || targets.Verify(call.header, call.body, first[0], b.clock.Now()) == nil {
		t.Fatalf("after the grace: %v", call.header)
	}
	b.audit(t)
}

// TestCallbackPolicyNarrowedMidCall: a connection dialed while loopback
// was allowed, busy with a call when an admin narrows
// callbacks.allowed_networks, is not used again once the call ends: the
// next call to the same address dials under the new policy and is refused.
func TestCallbackPolicyNarrowedMidCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/held" {
			close(held)
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	b.callbacks(t, nil)
	ingest := func(path string) *projection.Message {
		t.Helper()
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "nowhere", From: "a", To: "b", Payload: []byte("x"), CallbackURL: srv.URL + path})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	refused := func(m *projection.Message) {
		t.Helper()
		testpoll.Until(t, "a call refused", func() bool { return b.callbackState(t, m).State == lifecycle.StateRetrying })
		if cb := b.callbackState(t, m); !strings.Contains(cb.LastError, "is a loopback address") {
			t.Errorf("a call after the change: %+v", cb)
		}
	}
	first := ingest("/held")
	<-held
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{}, admin); err != nil {
		t.Fatal(err)
	}
	// A call while the first is held is the first under the new policy.
	refused(ingest("/between"))
	close(release)
	testpoll.Until(t, "the held call delivered", func() bool { return b.callbackState(t, first).State == lifecycle.StateDelivered })
	refused(ingest("/after"))
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(paths, []string{"/held"}) {
		t.Errorf("the server got %v", paths)
	}
	b.audit(t)
}
