package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/workers"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerProcessEnv) != "" {
		os.Exit(workerProcess())
	}
	dbtest.Main(m)
}

const admin = "operator:admin"

// quiet keeps the runtime's logs to warnings and errors.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// bundle is what a test of the runtime works with: a database, an embedded
// NATS server, a Writer that publishes its wake-ups there, and an HTTP sink.
type bundle struct {
	ctx     context.Context
	db      *pgxpool.Pool
	clock   *testclock.Clock
	nc      *nats.Conn
	w       *commands.Writer
	reg     *prometheus.Registry
	metrics *workers.Metrics
	sink    *sink
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), clock: testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)),
		reg: prometheus.NewRegistry(), sink: newSink(t)}
	b.db = dbtest.Pool(t)
	var err error
	ns := natsserver.New(natsserver.Config{})
	t.Cleanup(func() { ns.Stop(context.Background()) })
	if err := ns.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b.nc, err = ns.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.nc.Close)
	b.metrics = workers.NewMetrics(b.reg)
	b.w = b.writer(t, workers.NewPublisher(b.nc, nil, b.metrics))
	return b
}

func (b *bundle) writer(t testing.TB, n commands.Notifier) *commands.Writer {
	t.Helper()
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now, Logger: quiet}, DB: b.db, Notifier: n,
		Observer: b.metrics})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runtime starts a Runtime on the bundle, stopped when the test ends.
func (b *bundle) runtime(t *testing.T, grace time.Duration) *workers.Runtime {
	t.Helper()
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, NATS: b.nc,
		DrainGrace: grace, Metrics: b.metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	return rt
}

func (b *bundle) sweeper(t *testing.T) *sweep.Sweeper {
	t.Helper()
	s, err := sweep.New(sweep.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// target creates a target and a route to it from source "erp".
func (b *bundle) target(t testing.TB, spec lifecycle.Target) {
	t.Helper()
	if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: spec.Name}, admin); err != nil {
		t.Fatal(err)
	}
}

// httpTarget is an enabled http target posting to the sink.
func (b *bundle) httpTarget(name string) lifecycle.Target {
	cfg, _ := json.Marshal(map[string]string{"url": b.sink.URL})
	return lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: cfg}
}

func newMessage(i int) commands.NewMessage {
	return commands.NewMessage{Source: "erp", From: "acme", To: "globex",
		ContentType: "text/plain", Payload: fmt.Appendf(nil, "message %d", i)}
}

func (b *bundle) ingest(t *testing.T, n int) []*projection.Message {
	t.Helper()
	var out []*projection.Message
	for i := range n {
		m, _, err := b.w.Ingest(b.ctx, newMessage(i))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func (b *bundle) load(t *testing.T, id uuid.UUID) *projection.Message {
	t.Helper()
	m, err := projection.Load(b.ctx, b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitStatus polls until every message has the status.
func (b *bundle) waitStatus(t *testing.T, want lifecycle.MessageStatus, ms ...*projection.Message) {
	t.Helper()
	ids := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	defer func() {
		if t.Failed() {
			rows, _ := b.db.Query(context.Background(), `SELECT state, count(*) FROM deliveries WHERE message_id = ANY($1) GROUP BY state`, ids)
			counts, _ := pgx.CollectRows(rows, pgx.RowToMap)
			t.Logf("deliveries by state: %v", counts)
		}
	}()
	testpoll.Until(t, fmt.Sprintf("%d messages %s", len(ms), want), func() bool {
		var n int
		err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM messages WHERE id = ANY($1) AND status = $2`, ids, want).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == len(ms)
	})
}

// waitState polls until the delivery is in the state.
func (b *bundle) waitState(t *testing.T, id uuid.UUID, want lifecycle.DeliveryState) {
	t.Helper()
	testpoll.Until(t, fmt.Sprintf("delivery %s %s", id, want), func() bool {
		var state string
		if err := b.db.QueryRow(b.ctx, `SELECT state FROM deliveries WHERE id = $1`, id).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state == string(want)
	})
}

// audit fails the test on any violation.
func (b *bundle) audit(t *testing.T) {
	t.Helper()
	dbtest.Audit(t, b.db)
}

// sink is an HTTP receiver that counts what it got per idempotency key and
// answers as the test says.
type sink struct {
	*httptest.Server
	mu      sync.Mutex
	got     map[string]int
	headers http.Header
	// answer, when set, picks the status of the n-th request (from 1).
	answer func(n int, w http.ResponseWriter, r *http.Request) int
	n      int
}

func newSink(t testing.TB) *sink {
	s := &sink{got: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice a client that hangs up.
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.n++
		n, answer := s.n, s.answer
		s.headers = r.Header.Clone()
		s.mu.Unlock()
		status := http.StatusOK
		if answer != nil {
			status = answer(n, w, r)
		}
		if status/100 == 2 {
			s.mu.Lock()
			s.got[r.Header.Get("Idempotency-Key")]++
			s.mu.Unlock()
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) setAnswer(f func(n int, w http.ResponseWriter, r *http.Request) int) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

// hold makes the sink answer 200 only once release is closed (or the
// request is given up).
func (s *sink) hold(release <-chan struct{}) {
	s.setAnswer(func(_ int, _ http.ResponseWriter, r *http.Request) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
}

func (s *sink) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[key]
}

func (s *sink) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
