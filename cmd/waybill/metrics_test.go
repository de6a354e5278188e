package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
)

// metricsSetup starts a server on a fresh database with three http
// targets: ok, whose receiver answers 200, bad, whose receiver answers 400,
// both routed from erp, and idle, routed from nowhere. The targets are
// made before the server's start, by another server, so that what the
// returned one serves is what a server serves from its start.
func metricsSetup(t *testing.T) (*server, *api) {
	t.Helper()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(receiver.Close)
	_, dbURL, ns := shared(t)
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "var")
	args := []string{"--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", dir}
	first := startServer(t, bin, args...)
	a := first.adminClient(t, dir)
	for _, name := range []string{"ok", "bad", "idle"} {
		a.call("POST", "/targets", map[string]any{"name": name, "kind": "http",
			"config": map[string]any{"url": receiver.URL + "/" + name}}, http.StatusCreated, nil)
		if name != "idle" {
			a.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": name}, http.StatusCreated, nil)
		}
	}
	stopServer(t, first)
	s := startServer(t, bin, args...)
	a.base = "http://" + s.addr + "/api/v1"
	return s, a
}

// perTarget are the series each target has from the start.
func perTarget(target string) []string {
	var out []string
	for _, state := range lifecycle.CountedStates {
		out = append(out, fmt.Sprintf(`waybill_deliveries{state=%q,target=%q}`, state, target))
	}
	for _, o := range lifecycle.OutcomeKinds {
		for _, class := range []string{"2xx", "3xx", "4xx", "5xx", "none"} {
			out = append(out, fmt.Sprintf(`waybill_attempts_total{outcome=%q,status_class=%q,target=%q}`, o, class, target))
		}
	}
	return append(out,
		fmt.Sprintf(`waybill_attempts_total{outcome="released",status_class="none",target=%q}`, target),
		fmt.Sprintf(`waybill_oldest_due_seconds{target=%q}`, target),
		fmt.Sprintf(`waybill_attempt_duration_seconds_count{target=%q}`, target),
		fmt.Sprintf(`waybill_delivery_latency_seconds_count{target=%q}`, target))
}

// TestPerTargetMetricsMatchTheAPI: every target's series are there, at
// zero, on a server's first scrape, and after traffic its figures are the
// API's: its deliveries by state sum to /stats' deliveries_by_state, its
// in-flight ones to its in_flight, its oldest due is its
// oldest_due_seconds (none here), and its delivered deliveries are its
// attempts delivered with a 2xx and its latency's count.
func TestPerTargetMetricsMatchTheAPI(t *testing.T) {
	t.Parallel()
	s, a := metricsSetup(t)
	url := "http://" + s.addr + "/metrics"
	got := scrape(t, url, a.token)
	for _, target := range []string{"ok", "bad", "idle"} {
		for _, name := range perTarget(target) {
			if v, ok := got[name]; !ok || v != 0 {
				t.Errorf("%s = %v (present %v) on the first scrape, want 0", name, v, ok)
			}
		}
	}

	const n = 6
	for i := range n {
		a.call("POST", "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex",
			"payload": fmt.Sprintf("message %d", i)}, http.StatusCreated, nil)
	}
	var stats struct {
		DeliveriesByState map[string]float64 `json:"deliveries_by_state"`
		Targets           []struct {
			Target           string
			InFlight         float64 `json:"in_flight"`
			OldestDueSeconds float64 `json:"oldest_due_seconds"`
		}
	}
	// The gauges follow the sweep's passes: wait for one after the last
	// outcome.
	testpoll.Until(t, "the gauges to show every delivery settled", func() bool {
		got = scrape(t, url, a.token)
		return got[`waybill_deliveries{state="delivered",target="ok"}`] == n &&
			got[`waybill_deliveries{state="failed",target="bad"}`] == n
	})
	a.call("GET", "/stats", nil, http.StatusOK, &stats)
	byState := map[string]float64{}
	inFlight := map[string]float64{}
	for _, target := range []string{"ok", "bad", "idle"} {
		for _, state := range lifecycle.CountedStates {
			v := got[fmt.Sprintf(`waybill_deliveries{state=%q,target=%q}`, state, target)]
			byState[string(state)] += v
			if state.InFlight() {
				inFlight[target] += v
			}
		}
	}
	for state, want := range stats.DeliveriesByState {
		if byState[state] != want {
			t.Errorf("%s deliveries: the gauges sum to %v, /stats says %v", state, byState[state], want)
		}
	}
	if len(stats.Targets) != 2 {
		t.Errorf("/stats targets %+v, want ok and bad", stats.Targets)
	}
	for _, ts := range stats.Targets {
		if inFlight[ts.Target] != ts.InFlight {
			t.Errorf("%s in flight: the gauges say %v, /stats %v", ts.Target, inFlight[ts.Target], ts.InFlight)
		}
		if v := got[fmt.Sprintf(`waybill_oldest_due_seconds{target=%q}`, ts.Target)]; v != ts.OldestDueSeconds {
			t.Errorf("%s oldest due: the gauge says %v, /stats %v", ts.Target, v, ts.OldestDueSeconds)
		}
	}
	for name, want := range map[string]float64{
		`waybill_attempts_total{outcome="delivered",status_class="2xx",target="ok"}`: n,
		`waybill_delivery_latency_seconds_count{target="ok"}`:                        n,
		`waybill_attempts_total{outcome="failed",status_class="4xx",target="bad"}`:   n,
		`waybill_delivery_latency_seconds_count{target="bad"}`:                       0,
		`waybill_attempt_duration_seconds_count{target="bad"}`:                       n,
		`waybill_deliveries{state="queued",target="idle"}`:                           0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// dashboardMetric is a metric name in a query, without the suffix of a
// histogram's series.
var dashboardMetric = regexp.MustCompile(`\b(waybill_[a-z_]+?)(_bucket|_count|_sum)?\b`)

// documentedMetric is a metric of the table in operations.md, *Metrics*.
var documentedMetric = regexp.MustCompile("(?m)^\\| `(waybill_[a-z_]+)` \\|")

// TestDashboardQueriesServedMetrics: every metric the Grafana dashboard
// in docs/ queries is one a server serves, and every one a server serves is
// in the table of docs/operations.md.
func TestDashboardQueriesServedMetrics(t *testing.T) {
	t.Parallel()
	s, a := metricsSetup(t)
	a.call("POST", "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex", "payload": "one"},
		http.StatusCreated, nil)
	served := map[string]bool{}
	for name := range scrape(t, "http://"+s.addr+"/metrics", a.token) {
		name, _, _ = strings.Cut(name, "{")
		served[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")] = true
	}

	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Definition string }
		}
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range dashboard.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	for _, v := range dashboard.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	queried := 0
	for _, expr := range exprs {
		for _, m := range dashboardMetric.FindAllStringSubmatch(expr, -1) {
			queried++
			if !served[m[1]] {
				t.Errorf("the dashboard queries %s (%s), which the server does not serve", m[1], expr)
			}
		}
	}
	if queried == 0 {
		t.Fatal("the dashboard queries no metric")
	}

	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range documentedMetric.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	for name := range served {
		if strings.HasPrefix(name, "waybill_") && !slices.Contains(documented, name) {
			t.Errorf("the server serves %s, which operations.md's Metrics table does not list", name)
		}
	}
}
