package alerts_test

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// inbox keeps what a NATS subscription received.
type inbox struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (in *inbox) add(m *nats.Msg) {
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.mu.Unlock()
}

func (in *inbox) all() []*nats.Msg {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.msgs)
}

// webhook is an alert receiver whose answers the test decides.
type webhook struct {
	*httptest.Server
	mu sync.Mutex
	// keys holds the Idempotency-Key of every request; accepted those
	// answered 200, with their bodies.
	keys     []string
	accepted map[string]alerts.Alert
	// headers are every request's, for their signatures, with bodies.
	headers []http.Header
	bodies  [][]byte
	// fail makes the next requests answer 503 while it is above 0, or a
	// redirect to redirect when that is set.
	fail     int
	redirect string
	// taken, when set, is called with the key of each request answered
	// 200, before the answer goes.
	taken func(key string)
}

func newWebhook(t *testing.T) *webhook {
	h := &webhook{accepted: map[string]alerts.Alert{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		h.keys = append(h.keys, key)
		h.headers = append(h.headers, r.Header.Clone())
		h.bodies = append(h.bodies, body)
		if h.fail > 0 {
			h.fail--
			if h.redirect != "" {
				http.Redirect(w, r, h.redirect, http.StatusTemporaryRedirect)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var a alerts.Alert
		if err := json.Unmarshal(body, &a); err != nil || a.ID != key {
			t.Errorf("webhook got %q (key %q): %v", body, key, err)
		}
		h.accepted[key] = a
		if h.taken != nil {
			h.taken(key)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *webhook) state() (keys []string, accepted int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.keys), len(h.accepted)
}

func (h *webhook) setTaken(f func(key string)) {
	h.mu.Lock()
	h.taken = f
	h.mu.Unlock()
}

func (h *webhook) setFail(n int) {
	h.mu.Lock()
	h.fail = n
	h.mu.Unlock()
}

type env struct {
	ctx   context.Context
	db    *pgxpool.Pool
	w     *commands.Writer
	clock *testclock.Clock
	srv   *server.Server
	hook  *webhook
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, 0)
}

// setupWith is setup with a NATS server whose max payload is maxPayload
// bytes, its default when 0.
func setupWith(t *testing.T, maxPayload int32) *env {
	t.Helper()
	ctx := t.Context()
	db := dbtest.Pool(t)
	var err error
	e := &env{ctx: ctx, db: db, clock: testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)), hook: newWebhook(t)}
	if e.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: e.clock.Now}, DB: db}); err != nil {
		t.Fatal(err)
	}
	e.srv, err = server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	go e.srv.Start()
	if !e.srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(e.srv.Shutdown)
	return e
}

func (e *env) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL(), nats.InProcessServer(e.srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// subscribe collects what is published on subject.
func (e *env) subscribe(t *testing.T, subject string) *inbox {
	t.Helper()
	in := &inbox{}
	nc := e.connect(t)
	if _, err := nc.Subscribe(subject, in.add); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return in
}

func (e *env) alerter(t *testing.T, reg prometheus.Registerer) *alerts.Alerter {
	t.Helper()
	a, err := alerts.New(alerts.Config{DB: e.db, NATS: e.connect(t), WebhookURL: e.hook.URL,
		SendBackoff: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	return a
}

const admin = "operator:admin"

// route creates target alpha and a route to it for source erp.
func (e *env) route(t *testing.T) {
	t.Helper()
	e.routeTo(t, "alpha")
}

// routeTo creates the http target name and a route to it for source erp.
func (e *env) routeTo(t *testing.T, name string) {
	t.Helper()
	target := lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}
	if _, err := e.w.CreateTarget(e.ctx, target, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.CreateRoute(e.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
		t.Fatal(err)
	}
}

func (e *env) ingest(t *testing.T, source string) commands.NewMessage {
	t.Helper()
	in := commands.NewMessage{Source: source, From: "acme", To: "globex", ContentType: "text/plain", Payload: []byte("hi")}
	if _, created, err := e.w.Ingest(e.ctx, in); err != nil || !created {
		t.Fatalf("ingest: %v %v", created, err)
	}
	return in
}

// notRouted ingests a message no route matches.
func (e *env) notRouted(t *testing.T) {
	t.Helper()
	e.ingest(t, "crm")
}

// stall ingests a message for alpha and wakes its delivery until it stalls.
func (e *env) stall(t *testing.T) {
	t.Helper()
	m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Deliveries[0]
	for n := 1; ; n++ {
		e.clock.Advance(lifecycle.DispatchBackoff(n))
		kind, err := e.w.Wake(e.ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if kind == journal.KindDeliveryStalled {
			return
		}
		if kind != journal.KindDeliveryWoken {
			t.Fatalf("wake %d: %q", n, kind)
		}
	}
}

// fail ingests a message for alpha whose only attempt fails for good,
// with the error given.
func (e *env) fail(t *testing.T, reason string) {
	t.Helper()
	m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := e.w.Claim(e.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.Complete(e.ctx, m.Deliveries[0].ID, claim.Token, lifecycle.Failed(reason)); err != nil {
		t.Fatal(err)
	}
}

// gone makes target beacon, routed from source iot beside target spare,
// whose receiver answers two attempts 410 Gone: one target.disabled, and
// no message fails, each having a delivery to spare still to go.
// unhealthy opens the breaker of a target "flaky" whose one attempt fails.
func (e *env) unhealthy(t *testing.T) {
	t.Helper()
	b := lifecycle.DefaultBreaker()
	b.MinRequests, b.FailureRate = 1, 1
	after := lifecycle.Duration(lifecycle.DefaultDisableAfter)
	target := lifecycle.Target{Name: "flaky", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Health: &lifecycle.Health{Breaker: &b, DisableAfter: &after}}
	if _, err := e.w.CreateTarget(e.ctx, target, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.CreateRoute(e.ctx, lifecycle.Route{Source: "sensor", From: "*", To: "*", Target: "flaky"}, admin); err != nil {
		t.Fatal(err)
	}
	m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "sensor", From: "acme", To: "globex", Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := e.w.Claim(e.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.Complete(e.ctx, claim.Delivery.ID, claim.Token, lifecycle.Retry(e.clock.Now().Add(time.Hour), "500")); err != nil {
		t.Fatal(err)
	}
}

func (e *env) gone(t *testing.T) {
	t.Helper()
	for _, name := range []string{"beacon", "spare"} {
		target := lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}
		if _, err := e.w.CreateTarget(e.ctx, target, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := e.w.CreateRoute(e.ctx, lifecycle.Route{Source: "iot", From: "*", To: "*", Target: name}, admin); err != nil {
			t.Fatal(err)
		}
	}
	var claims []commands.Claim
	for range 2 {
		m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "iot", From: "acme", To: "globex", Payload: []byte("hi")})
		if err != nil {
			t.Fatal(err)
		}
		d := m.Deliveries[slices.IndexFunc(m.Deliveries, func(d projection.Delivery) bool { return d.Target == "beacon" })]
		claim, err := e.w.Claim(e.ctx, d.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, claim)
	}
	for _, c := range claims {
		if _, err := e.w.Complete(e.ctx, c.Delivery.ID, c.Token, lifecycle.Gone("410 Gone")); err != nil {
			t.Fatal(err)
		}
	}
}

// laneHeld makes a fifo target whose lanes alert after a minute, holds a
// lane with a delivery waiting past that, and records the report.
func (e *env) laneHeld(t *testing.T) {
	t.Helper()
	target := lifecycle.Target{Name: "ordered", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO, HeadAlertAfter: lifecycle.Duration(time.Minute)}}
	if _, err := e.w.CreateTarget(e.ctx, target, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.CreateRoute(e.ctx, lifecycle.Route{Source: "lab", From: "*", To: "*", Target: "ordered"}, admin); err != nil {
		t.Fatal(err)
	}
	var head *projection.Message
	for range 2 {
		m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "lab", From: "acme", To: "globex", Payload: []byte("hi"), OrderingKey: "p-1"})
		if err != nil {
			t.Fatal(err)
		}
		head = cmp.Or(head, m)
	}
	e.clock.Advance(2 * time.Minute)
	if kind, err := e.w.ReportLaneHeld(e.ctx, head.Deliveries[0].ID); err != nil || kind != journal.KindDeliveryLaneHeld {
		t.Fatalf("report the lane held: %q, %v", kind, err)
	}
	// Once per head.
	if kind, err := e.w.ReportLaneHeld(e.ctx, head.Deliveries[0].ID); err != nil || kind != "" {
		t.Fatalf("report it again: %q, %v", kind, err)
	}
}

// allSent reports whether n alerts are stored and every channel took each.
func (e *env) allSent(t *testing.T, n int) bool {
	t.Helper()
	var stored, unsent int
	err := e.db.QueryRow(e.ctx, `SELECT count(*),
		count(*) FILTER (WHERE nats_sent_at IS NULL OR (webhook AND webhook_sent_at IS NULL)) FROM alerts`).Scan(&stored, &unsent)
	if err != nil {
		t.Fatal(err)
	}
	return stored == n && unsent == 0
}

// caughtUp reports whether the group has consumed the whole journal.
func caughtUp(t *testing.T, reg *prometheus.Registry, group string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "waybill_feed_lag_events" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == group {
				return m.GetGauge().GetValue() == 0
			}
		}
	}
	return false
}

func TestEachAlertOnceAcrossARestart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.alerts.>")
	reg := prometheus.NewRegistry()
	a := e.alerter(t, reg)
	e.route(t)
	e.notRouted(t)
	e.stall(t)
	e.fail(t, "410 Gone")
	e.laneHeld(t)
	e.gone(t)
	e.unhealthy(t)

	testpoll.Until(t, "six alerts sent both ways", func() bool {
		_, accepted := e.hook.state()
		return len(got.all()) == 6 && accepted == 6 && e.allSent(t, 6)
	})
	ids := map[string]alerts.Code{}
	for _, m := range got.all() {
		var al alerts.Alert
		if err := json.Unmarshal(m.Data, &al); err != nil {
			t.Fatal(err)
		}
		if m.Subject != "waybill.alerts."+string(al.Code) || m.Header.Get(nats.MsgIdHdr) != al.ID {
			t.Errorf("alert %s on %s with id %s", al.ID, m.Subject, m.Header.Get(nats.MsgIdHdr))
		}
		ids[al.ID] = al.Code
	}
	codes := slices.Sorted(func(yield func(string) bool) {
		for _, c := range ids {
			yield(string(c))
		}
	})
	if !slices.Equal(codes, []string{"delivery_stalled", "lane_blocked", "message_failed", "message_not_routed", "target_disabled", "target_unhealthy"}) {
		t.Fatalf("codes %v", codes)
	}
	keys, _ := e.hook.state()
	sort.Strings(keys)
	if want := slices.Sorted(func(yield func(string) bool) {
		for id := range ids {
			yield(id)
		}
	}); !slices.Equal(keys, want) {
		t.Errorf("webhook keys %v, want %v", keys, want)
	}
	for _, c := range alerts.Codes {
		if n := counter(t, reg, "waybill_alerts_raised_total", string(c)); n != 1 {
			t.Errorf("raised %s: %v", c, n)
		}
	}

	// A crash before any ack: the next alerter reads the whole journal again.
	a.Stop(e.ctx)
	if _, err := e.db.Exec(e.ctx, `UPDATE feed_offsets SET offset_acked = 0, last_processed_transaction_id = '0'
		WHERE consumer_group = $1`, alerts.AlerterGroup); err != nil {
		t.Fatal(err)
	}
	reg2 := prometheus.NewRegistry()
	e.alerter(t, reg2)
	testpoll.Until(t, "the restarted alerter to catch up", func() bool { return caughtUp(t, reg2, alerts.AlerterGroup) })
	for _, c := range alerts.Codes {
		if n := counter(t, reg2, "waybill_alerts_raised_total", string(c)); n != 0 {
			t.Errorf("raised %s again: %v", c, n)
		}
	}
	var n int
	if err := e.db.QueryRow(e.ctx, `SELECT count(*) FROM alerts`).Scan(&n); err != nil || n != 6 {
		t.Errorf("%d alerts stored, %v", n, err)
	}
	if keys, _ := e.hook.state(); len(got.all()) != 6 || len(keys) != 6 {
		t.Errorf("after the restart: %d on NATS, %d webhook requests", len(got.all()), len(keys))
	}
}

// TestAStreamBegunBeforeTheStart: an alerter that starts in the middle of
// a message's stream, which it never saw from its start, reads the stream
// to fold it and raises the alert of its next event.
func TestAStreamBegunBeforeTheStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.alerts.>")
	reg := prometheus.NewRegistry()
	a := e.alerter(t, reg)
	e.route(t)
	m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := e.w.Claim(e.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the alerter to catch up", func() bool { return caughtUp(t, reg, alerts.AlerterGroup) })
	a.Stop(e.ctx)

	reg2 := prometheus.NewRegistry()
	e.alerter(t, reg2)
	if _, err := e.w.Complete(e.ctx, m.Deliveries[0].ID, claim.Token, lifecycle.Failed("410 Gone")); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the alert sent", func() bool { return len(got.all()) == 1 && e.allSent(t, 1) })
	var al alerts.Alert
	if err := json.Unmarshal(got.all()[0].Data, &al); err != nil {
		t.Fatal(err)
	}
	if al.Code != alerts.CodeMessageFailed || al.MessageID != m.ID || counter(t, reg2, "waybill_alerts_raised_total",
		string(alerts.CodeMessageFailed)) != 1 {
		t.Errorf("alert %+v", al)
	}
}

// TestAFailureBeforeTheStart: an alerter that starts after one delivery of
// a message failed beside another still in flight raises message_failed
// when the other settles, and nothing for a message whose deliveries all
// succeed, though it holds the state of neither.
func TestAFailureBeforeTheStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.alerts.>")
	reg := prometheus.NewRegistry()
	a := e.alerter(t, reg)
	e.route(t)
	e.routeTo(t, "beta")
	var claims [2][2]commands.Claim
	var msgs [2]*projection.Message
	for i := range msgs {
		m, _, err := e.w.Ingest(e.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("hi")})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = m
		for j, d := range m.Deliveries {
			if claims[i][j], err = e.w.Claim(e.ctx, d.ID, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	failing, fine := msgs[0], msgs[1]
	if _, err := e.w.Complete(e.ctx, failing.Deliveries[0].ID, claims[0][0].Token, lifecycle.Failed("410 Gone")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.Complete(e.ctx, fine.Deliveries[0].ID, claims[1][0].Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}

	// The next alerter goes on from this one's place, holding no state.
	testpoll.Until(t, "the alerter to catch up", func() bool { return caughtUp(t, reg, alerts.AlerterGroup) })
	a.Stop(e.ctx)
	reg = prometheus.NewRegistry()
	e.alerter(t, reg)
	for i, m := range msgs {
		if _, err := e.w.Complete(e.ctx, m.Deliveries[1].ID, claims[i][1].Token, lifecycle.Delivered("200")); err != nil {
			t.Fatal(err)
		}
	}
	testpoll.Until(t, "the alerter to catch up", func() bool { return caughtUp(t, reg, alerts.AlerterGroup) })
	testpoll.Until(t, "the alert sent", func() bool { return len(got.all()) == 1 && e.allSent(t, 1) })
	var al alerts.Alert
	if err := json.Unmarshal(got.all()[0].Data, &al); err != nil {
		t.Fatal(err)
	}
	if al.Code != alerts.CodeMessageFailed || al.MessageID != failing.ID {
		t.Errorf("alert %+v, want %s of %s", al, alerts.CodeMessageFailed, failing.ID)
	}
}

func TestFailedWebhookIsRetriedUntilTaken(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.alerts.>")
	e.hook.setFail(2)
	reg := prometheus.NewRegistry()
	e.alerter(t, reg)
	e.notRouted(t)

	testpoll.Until(t, "the alert marked sent", func() bool { return e.allSent(t, 1) })
	keys, accepted := e.hook.state()
	if len(keys) != 3 || accepted != 1 || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("webhook requests %v, %d accepted", keys, accepted)
	}
	if n := len(got.all()); n != 1 {
		t.Errorf("%d alerts on NATS", n)
	}
	if n := counter(t, reg, "waybill_alert_sends_failed_total", "webhook"); n != 2 {
		t.Errorf("webhook failures counted: %v", n)
	}
}

// TestWebhookRedirectIsNotFollowed: the webhook's redirect is a failed
// send, tried again at the webhook; where it pointed gets nothing.
func TestWebhookRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	e.hook.mu.Lock()
	e.hook.fail, e.hook.redirect = 1, other.URL
	e.hook.mu.Unlock()
	reg := prometheus.NewRegistry()
	e.alerter(t, reg)
	e.notRouted(t)

	testpoll.Until(t, "the alert marked sent", func() bool { return e.allSent(t, 1) })
	if keys, accepted := e.hook.state(); len(keys) != 2 || accepted != 1 {
		t.Errorf("webhook requests %v, %d accepted", keys, accepted)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect was followed: %d requests elsewhere", n)
	}
	if n := counter(t, reg, "waybill_alert_sends_failed_total", "webhook"); n != 1 {
		t.Errorf("webhook failures counted: %v", n)
	}
}

func TestUnsentAlertIsSentAtTheNextStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.alerts.>")
	e.hook.setFail(1 << 30)
	a := e.alerter(t, nil)
	e.notRouted(t)
	testpoll.Until(t, "the alert on NATS and refused by the webhook", func() bool {
		keys, _ := e.hook.state()
		return len(got.all()) == 1 && len(keys) >= 1
	})
	a.Stop(e.ctx)

	e.hook.setFail(0)
	e.alerter(t, nil)
	testpoll.Until(t, "the alert marked sent", func() bool { return e.allSent(t, 1) })
	if _, accepted := e.hook.state(); accepted != 1 || len(got.all()) != 1 {
		t.Errorf("%d accepted by the webhook, %d on NATS", accepted, len(got.all()))
	}
}

func TestEventStreamPublishesEachEventOnceInOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.events.>")
	reg := prometheus.NewRegistry()
	start := func() *alerts.EventStream {
		s, err := alerts.NewEventStream(alerts.StreamConfig{DB: e.db, NATS: e.connect(t),
			PollInterval: 10 * time.Millisecond, Metrics: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(e.ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(context.Background()) })
		return s
	}
	s := start()
	e.route(t)
	e.fail(t, "410 Gone")
	check := func() {
		t.Helper()
		want := e.feedOrder(t)
		testpoll.Until(t, "every event published", func() bool { return len(got.all()) >= len(want) && caughtUp(t, reg, alerts.StreamGroup) })
		msgs := got.all()
		if len(msgs) != len(want) {
			t.Fatalf("%d events published, want %d", len(msgs), len(want))
		}
		for i, m := range msgs {
			var body struct {
				Position int64           `json:"position"`
				Kind     journal.Kind    `json:"kind"`
				Payload  json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(m.Data, &body); err != nil {
				t.Fatal(err)
			}
			if _, err := journal.Decode(body.Kind, body.Payload); err != nil {
				t.Errorf("payload of %d: %v", body.Position, err)
			}
			w := want[i]
			if m.Subject != "waybill.events."+w.Kind || m.Header.Get(nats.MsgIdHdr) != strconv.FormatInt(w.Position, 10) ||
				body.Position != w.Position || string(body.Kind) != w.Kind {
				t.Errorf("message %d: %s id %s position %d, want %s at %d", i, m.Subject, m.Header.Get(nats.MsgIdHdr), body.Position, w.Kind, w.Position)
			}
		}
	}
	check()

	// A new stream in the same group goes on after the last event published.
	s.Stop(e.ctx)
	start()
	e.notRouted(t)
	check()

	// A source's definition goes out with its password masked.
	if _, err := e.w.CreateSource(e.ctx, lifecycle.Source{Name: "ciims", Kind: "inbox_table", Enabled: false,
		Config: json.RawMessage(`{"database_url": "postgres://waybill:s3cret@inbox.example/aodb", "table": "cminmsgs",
			"id_column": "id", "payload_column": "body", "from_column": "sender", "to_column": "receiver",
			"processed_column": "date_processed"}`)}, admin); err != nil {
		t.Fatal(err)
	}
	check()
	msgs := got.all()
	if last := string(msgs[len(msgs)-1].Data); strings.Contains(last, "s3cret") ||
		!strings.Contains(last, "postgres://waybill:***@inbox.example/aodb") {
		t.Errorf("source.created published as %s", last)
	}

	// What is published reads as written: <, > and & are not escaped for HTML.
	e.fail(t, "400 <b>refused</b> & gone")
	check()
	if !slices.ContainsFunc(got.all(), func(m *nats.Msg) bool { return strings.Contains(string(m.Data), `"400 <b>refused</b> & gone"`) }) {
		t.Errorf("no event published with the error as written; the last: %s", got.all()[len(got.all())-1].Data)
	}
}

// counter reads the counter name{label} of reg.
func counter(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// journalRow is an event as the stream's tests check it.
type journalRow struct {
	Position int64
	Kind     string
}

// feedOrder is every event of the journal in feed order.
func (e *env) feedOrder(t *testing.T) []journalRow {
	t.Helper()
	rows, _ := e.db.Query(e.ctx, `SELECT position, kind FROM journal ORDER BY txid, position`)
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[journalRow])
	if err != nil {
		t.Fatal(err)
	}
	return events
}
