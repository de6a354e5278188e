package intake

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// runtime starts a Runtime on db (through which it keeps its leases and
// takes its messages) named holder.
func (f *fixture) runtime(t *testing.T, db *pgxpool.Pool, holder string, reg prometheus.Registerer) *Runtime {
	t.Helper()
	rt, err := New(Config{Base: f.base, Writer: f.writer(t, db), DB: db, Holder: holder, Metrics: NewMetrics(reg),
		Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	return rt
}

func (f *fixture) holder(t *testing.T, source string) string {
	t.Helper()
	var h *string
	if err := f.db.QueryRow(f.ctx, `SELECT holder FROM source_state WHERE name = $1`, source).Scan(&h); err != nil {
		t.Fatal(err)
	}
	if h == nil {
		return ""
	}
	return *h
}

func (f *fixture) count(t *testing.T, source string) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow(f.ctx, `SELECT count(*) FROM messages WHERE source = $1`, source).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRuntimeHandsASourceOver: of two processes, one polls a source; when
// it stops it gives the lease back and the other takes the source at once;
// when it dies (its database away, so nothing is given back) the other
// takes the source when the lease ends.
func TestRuntimeHandsASourceOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	f.source(t, "drop", sources.KindDirectory, map[string]any{"dir": dir, "from": "a", "to": "b", "interval": "10ms", "settle": "1ms"})
	proxy := dbtest.NewProxy(t, f.db)
	first := f.runtime(t, proxy.Pool(t), "first", nil)
	testpoll.Until(t, "the first process to take the source", func() bool { return f.holder(t, "drop") == "first" })
	second := f.runtime(t, f.db, "second", nil)

	drop := func(name string, want int) {
		t.Helper()
		write(t, dir, name, name)
		testpoll.Until(t, name+" taken", func() bool {
			f.clock.Advance(time.Millisecond)
			return f.count(t, "drop") == want
		})
	}
	drop("1", 1)
	if h := f.holder(t, "drop"); h != "first" {
		t.Fatalf("holder %q", h)
	}

	// The first dies: its database is away, its lease stays until it ends.
	proxy.Cut()
	first.Stop(context.Background())
	write(t, dir, "2", "2")
	f.clock.Advance(29 * time.Second)
	// The second's next try at the lease, made here: refused until it ends.
	now := f.clock.Now()
	if _, held, err := sources.TakeLease(f.ctx, f.db, "drop", "second", now.Add(30*time.Second), now); err != nil || held {
		t.Fatalf("the lease was taken before it ended (%v)", err)
	}
	if h := f.holder(t, "drop"); h != "first" || f.count(t, "drop") != 1 {
		t.Fatalf("holder %q before the lease ended, %d messages", h, f.count(t, "drop"))
	}
	f.clock.Advance(time.Second)
	testpoll.Until(t, "the second process to take the source", func() bool { return f.holder(t, "drop") == "second" })
	testpoll.Until(t, "2 taken", func() bool { f.clock.Advance(time.Millisecond); return f.count(t, "drop") == 2 })

	// The second stops: it gives the lease back.
	second.Stop(context.Background())
	if h := f.holder(t, "drop"); h != "" {
		t.Fatalf("holder %q after a stop", h)
	}
	proxy.Restore()
	third := f.runtime(t, f.db, "third", nil)
	testpoll.Until(t, "the third process to take the source", func() bool { return f.holder(t, "drop") == "third" })
	drop("3", 3)
	third.Stop(context.Background())
}

// TestRuntimeReportsStatusAndMetrics: every series of a source exists at
// zero once the runtime knows it; a poll records its time and backlog, a
// failure its reason and time, in the source's state and in the metrics;
// a disabled source is let go.
func TestRuntimeReportsStatusAndMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(blocked, "in") // under a file: cannot be made
	f.source(t, "drop", sources.KindDirectory, map[string]any{"dir": dir, "from": "a", "to": "b", "interval": "10ms"})
	f.source(t, "ciims", sources.KindInboxTable, map[string]any{"database_url": "postgres://nobody@127.0.0.1:1/x",
		"table": "inbox", "id_column": "id", "payload_column": "body", "from_column": "f", "to_column": "t",
		"processed_column": "p", "interval": "10ms"})
	if _, err := f.w.UpdateSource(f.ctx, lifecycle.Source{Name: "ciims", Kind: sources.KindInboxTable, Enabled: false,
		Config: json.RawMessage(`{"database_url": "postgres://nobody@127.0.0.1:1/x", "table": "inbox", "id_column": "id",
		"payload_column": "body", "from_column": "f", "to_column": "t", "processed_column": "p"}`)}, admin); err != nil {
		t.Fatal(err)
	}
	f.source(t, "hooks", sources.KindWebhook, map[string]any{"verify": map[string]any{"scheme": "github", "secret": "x"}})
	reg := prometheus.NewRegistry()
	f.runtime(t, f.db, "only", reg)

	series := gather(t, reg)
	for _, name := range []string{"waybill_source_messages_total", "waybill_source_errors_total", "waybill_source_backlog",
		"waybill_source_lag_seconds", "waybill_source_catch_up_seconds"} {
		for _, source := range []string{"drop", "ciims"} {
			if _, ok := series[name+"/"+source]; !ok {
				t.Errorf("%s{source=%q} is missing", name, source)
			}
		}
	}
	if _, ok := series["waybill_source_markers_owed/ciims"]; !ok {
		t.Error("the markers owed of the inbox are missing")
	}
	if _, ok := series["waybill_source_markers_owed/drop"]; ok {
		t.Error("a directory has markers owed")
	}

	var lastError *string
	var lastPoll, errorAt *time.Time
	testpoll.Until(t, "the failure recorded", func() bool {
		err := f.db.QueryRow(f.ctx, `SELECT last_error, last_poll_at, last_error_at FROM source_state WHERE name = 'drop'`).
			Scan(&lastError, &lastPoll, &errorAt)
		return err == nil && lastError != nil
	})
	if !strings.Contains(*lastError, dir) || lastPoll == nil || errorAt == nil || !lastPoll.Equal(f.clock.Now()) {
		t.Errorf("state: %v %v %v", *lastError, lastPoll, errorAt)
	}
	testpoll.Until(t, "the errors counted", func() bool { return gather(t, reg)["waybill_source_errors_total/drop"] > 0 })
	if h := f.holder(t, "ciims"); h != "" {
		t.Errorf("a disabled source is held by %q", h)
	}
	// A webhook source is posted to, never polled.
	if h := f.holder(t, "hooks"); h != "" {
		t.Errorf("a webhook source is held by %q", h)
	}
	if _, ok := gather(t, reg)["waybill_source_messages_total/hooks"]; ok {
		t.Error("a webhook source has the series of a polled one")
	}
}

// gather reads the registry's source series as name/source → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, fam := range families {
		for _, m := range fam.GetMetric() {
			var source string
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" {
					source = l.GetValue()
				}
			}
			v := m.GetGauge().GetValue()
			if c := m.GetCounter(); c != nil {
				v = c.GetValue()
			}
			out[fam.GetName()+"/"+source] = v
		}
	}
	return out
}

// TestRuntimeSourcesStampTypeAndHeaders: a directory's and an inbox's
// messages carry the type and headers of their source's configuration,
// names lower case, which routes match on.
func TestRuntimeSourcesStampTypeAndHeaders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.w.CreateTarget(f.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url": "http://127.0.0.1:9/"}`)}, admin); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	url, inboxDB := inboxDB(t)
	stamp := map[string]any{"type": "invoice.created", "headers": map[string]string{"X-Tenant": "acme"}}
	f.source(t, "drop", sources.KindDirectory, map[string]any{"dir": dir, "from": "a", "to": "b", "interval": "10ms",
		"settle": "1ms", "type": stamp["type"], "headers": stamp["headers"]})
	f.source(t, "inbox", sources.KindInboxTable, map[string]any{"database_url": url, "table": "inbox", "id_column": "id",
		"payload_column": "body", "from_column": "sender", "to_column": "receiver", "processed_column": "processed",
		"interval": "10ms", "type": stamp["type"], "headers": stamp["headers"]})
	for _, source := range []string{"drop", "inbox"} {
		if _, err := f.w.CreateRoute(f.ctx, lifecycle.Route{Source: source, From: "*", To: "*", Target: "billing",
			Types: []string{"invoice.*"}, Filter: `message.headers["x-tenant"] == "acme"`}, admin); err != nil {
			t.Fatal(err)
		}
	}
	f.runtime(t, f.db, "one", nil)
	write(t, dir, "1.xml", "<invoice/>")
	insert(t, inboxDB, "invoice")
	for _, source := range []string{"drop", "inbox"} {
		testpoll.Until(t, source+" taken", func() bool { f.clock.Advance(time.Millisecond); return f.count(t, source) == 1 })
		m := f.messages(t, source)[0]
		if m.Type != "invoice.created" || len(m.Headers) != 1 || m.Headers["x-tenant"] != "acme" ||
			len(m.Deliveries) != 1 || m.Deliveries[0].Target != "billing" {
			t.Errorf("%s: the message %+v", source, m)
		}
	}
}

// panicky is a poller whose first poll panics.
type panicky struct {
	mu             sync.Mutex
	polls, resumes int
}

func (p *panicky) resume(int64) { p.mu.Lock(); p.resumes++; p.mu.Unlock() }

func (p *panicky) poll(context.Context) (report, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.polls++; p.polls == 1 {
		panic("a bug")
	}
	return report{owed: -1}, nil
}

func (p *panicky) close() {}

func (p *panicky) counts() (polls, resumes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.polls, p.resumes
}

// TestPanickingPollFailsThatPollAlone: a poll that panics is the poll's
// problem, recorded as the source's last error; the process lives on, and
// the poller resumes from the watermark before it polls again.
func TestPanickingPollFailsThatPollAlone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.source(t, "drop", sources.KindDirectory, map[string]any{"dir": t.TempDir(), "from": "a", "to": "b"})
	rt, err := New(Config{Base: f.base, Writer: f.writer(t, f.db), DB: f.db, Holder: "only"})
	if err != nil {
		t.Fatal(err)
	}
	p := &panicky{}
	ctx, cancel := context.WithCancel(f.ctx)
	run := &runner{rt: rt, spec: s, p: p, interval: time.Millisecond, cancel: cancel, done: make(chan struct{}),
		log: rt.log}
	go run.run(ctx)
	defer run.stop(context.Background())

	testpoll.Until(t, "a poll after the panic", func() bool { polls, _ := p.counts(); return polls >= 2 })
	if _, resumes := p.counts(); resumes != 2 {
		t.Errorf("resumed %d times, want 2: at the take and after the panic", resumes)
	}
	var lastError *string
	if err := f.db.QueryRow(f.ctx, `SELECT last_error FROM source_state WHERE name = 'drop'`).Scan(&lastError); err != nil {
		t.Fatal(err)
	}
	if lastError == nil || *lastError != "poll panicked: a bug" {
		t.Errorf("last error %v", lastError)
	}
}
