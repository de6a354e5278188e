package workers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
)

// TestMetricsShowEveryTargetFromTheStart: every series of a known target,
// enabled or not, is there at zero before anything happened; a created
// target gets its series at the next sync, a deleted one loses them; claims
// count as claimed.
func TestMetricsShowEveryTargetFromTheStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	off := b.httpTarget("off")
	off.Enabled = false
	if _, err := b.w.CreateTarget(b.ctx, off, admin); err != nil {
		t.Fatal(err)
	}
	rt := b.runtime(t, 0)

	want := func(target string) []string {
		var out []string
		for _, o := range []string{"delivered", "awaiting_ack", "retry", "failed"} {
			for _, c := range []string{"2xx", "3xx", "4xx", "5xx", "none"} {
				out = append(out, "waybill_attempts_total{outcome="+o+",status_class="+c+",target="+target+"}")
			}
		}
		return append(out,
			"waybill_attempts_total{outcome=released,status_class=none,target="+target+"}",
			"waybill_attempt_duration_seconds{target="+target+"}",
			"waybill_delivery_latency_seconds{target="+target+"}",
			"waybill_claims_total{result=claimed,target="+target+"}",
			"waybill_claims_total{result=conflict,target="+target+"}",
			"waybill_wakeups_dropped_total{target="+target+"}",
			"waybill_wakeups_failed_total{target="+target+"}",
			"waybill_wakeups_published_total{target="+target+"}",
		)
	}
	got := series(t, b.reg)
	for _, target := range []string{"web", "off"} {
		for _, s := range want(target) {
			if v, ok := got[s]; !ok || v != 0 {
				t.Errorf("%s = %v (present %v), want 0 from the start", s, v, ok)
			}
		}
	}

	if _, err := b.w.CreateTarget(b.ctx, b.httpTarget("new"), admin); err != nil {
		t.Fatal(err)
	}
	if err := b.w.DeleteTarget(b.ctx, "off", admin); err != nil {
		t.Fatal(err)
	}
	if err := rt.Sync(b.ctx); err != nil {
		t.Fatal(err)
	}
	got = series(t, b.reg)
	for _, s := range want("new") {
		if _, ok := got[s]; !ok {
			t.Errorf("%s missing after the target was created", s)
		}
	}
	for _, s := range want("off") {
		if _, ok := got[s]; ok {
			t.Errorf("%s still there after the target was deleted", s)
		}
	}

	ms := b.ingest(t, 3)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	if v := series(t, b.reg)["waybill_claims_total{result=claimed,target=web}"]; v != 3 {
		t.Errorf("claimed %v, want 3", v)
	}

	// Each attempt counts by its outcome and its answer's class; each
	// delivery delivered, by its latency.
	b.sink.mu.Lock()
	b.sink.answer = func(n int, _ http.ResponseWriter, _ *http.Request) int {
		if code, ok := map[int]int{4: http.StatusBadRequest, 5: http.StatusServiceUnavailable}[n]; ok {
			return code
		}
		return http.StatusOK
	}
	b.sink.mu.Unlock()
	b.waitState(t, b.ingest(t, 1)[0].Deliveries[0].ID, lifecycle.StateFailed)
	b.waitState(t, b.ingest(t, 1)[0].Deliveries[0].ID, lifecycle.StateRetrying)
	// The worker counts an attempt once its outcome's command returns,
	// which is after the state it recorded can be read.
	counted := map[string]float64{
		"waybill_attempts_total{outcome=delivered,status_class=2xx,target=web}": 3,
		"waybill_attempts_total{outcome=failed,status_class=4xx,target=web}":    1,
		"waybill_attempts_total{outcome=retry,status_class=5xx,target=web}":     1,
		"waybill_attempts_total{outcome=retry,status_class=none,target=web}":    0,
		"waybill_delivery_latency_seconds{target=web}":                          3,
	}
	testpoll.Until(t, "every attempt counted", func() bool {
		got = series(t, b.reg)
		for s, n := range counted {
			if got[s] != n {
				return false
			}
		}
		return true
	})
}

// series reads every series of the registry as name{label=value,…} (labels
// sorted) with its counter value, or its sample count for a histogram.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(labels)
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			v := m.GetCounter().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			out[name] = v
		}
	}
	return out
}
