package workers

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/lifecycle"
)

// Metrics are the runtime's counters, and the commands.Observer of the
// deliveries' latency. Labels are target names, outcome kinds, status
// classes and claim results only. Every series of a target exists, at
// zero, from the moment the runtime knows the target (Track), so a
// dashboard draws 0 rather than nothing.
type Metrics struct {
	attempts         *prometheus.CounterVec
	attemptSeconds   *prometheus.HistogramVec
	latency          *prometheus.HistogramVec
	claims           *prometheus.CounterVec
	wakeupsPublished *prometheus.CounterVec
	wakeupsFailed    *prometheus.CounterVec
	wakeupsDropped   *prometheus.CounterVec

	mu      sync.Mutex
	tracked map[string]bool
}

// The results of a claim, as waybill_claims_total counts them.
const (
	claimClaimed  = "claimed"
	claimConflict = "conflict"
)

// released is the outcome label of waybill_attempts_total of a claim
// given back, whose status class is always none.
const released = "released"

// statusClasses are the status_class labels of waybill_attempts_total:
// the class of the answer's HTTP status, or none without an answer.
var statusClasses = []string{"2xx", "3xx", "4xx", "5xx", noStatus}

const noStatus = "none"

// statusClass is the status_class label of an answer's HTTP status, 0
// for none.
func statusClass(code int) string {
	if code < 200 || code > 599 {
		return noStatus
	}
	return strconv.Itoa(code/100) + "xx"
}

// NewMetrics makes the metrics and registers them on reg; nil registers
// them nowhere.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_attempts_total", Help: "Attempts recorded, by target, outcome (delivered, awaiting_ack, retry, failed, released) and the class of the answer's HTTP status (2xx, 3xx, 4xx, 5xx, none).",
		}, []string{"target", "outcome", "status_class"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "waybill_attempt_duration_seconds", Help: "Time one attempt took, by target.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"target"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "waybill_delivery_latency_seconds", Help: "Time from a delivery's start (its message's ingest, or its redelivery) to its delivery, by target; with tracing on, exemplars carry the trace_id.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400},
		}, []string{"target"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_claims_total", Help: "Claims by target and result: claimed, or conflict for a wake-up whose delivery was not claimable any more (claimed elsewhere, settled, not due).",
		}, []string{"target", "result"}),
		wakeupsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_wakeups_published_total", Help: "Wake-ups published on NATS, by target.",
		}, []string{"target"}),
		wakeupsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_wakeups_failed_total", Help: "Wake-ups whose publish failed, by target; the sweep recovers them.",
		}, []string{"target"}),
		wakeupsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_wakeups_dropped_total", Help: "Wake-ups a busy worker dropped, by target; its catch-up and the sweep find the deliveries.",
		}, []string{"target"}),
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.attemptSeconds, m.latency, m.claims, m.wakeupsPublished, m.wakeupsFailed, m.wakeupsDropped)
	}
	return m
}

// Track makes every series of the targets exist, at zero where new, and
// removes those of targets no longer among them. The runtime calls it with
// all targets, enabled or not, whenever it reads them.
func (m *Metrics) Track(targets []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := make(map[string]bool, len(targets))
	for _, t := range targets {
		now[t] = true
		if m.tracked[t] {
			continue
		}
		for _, o := range lifecycle.OutcomeKinds {
			for _, c := range statusClasses {
				m.attempts.WithLabelValues(t, string(o), c)
			}
		}
		m.attempts.WithLabelValues(t, released, noStatus)
		m.attemptSeconds.WithLabelValues(t)
		m.latency.WithLabelValues(t)
		m.claims.WithLabelValues(t, claimClaimed)
		m.claims.WithLabelValues(t, claimConflict)
		m.wakeupsPublished.WithLabelValues(t)
		m.wakeupsFailed.WithLabelValues(t)
		m.wakeupsDropped.WithLabelValues(t)
	}
	for t := range m.tracked {
		if !now[t] {
			for _, vec := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
				m.attempts, m.attemptSeconds, m.latency, m.claims, m.wakeupsPublished, m.wakeupsFailed, m.wakeupsDropped,
			} {
				vec.DeletePartialMatch(prometheus.Labels{"target": t})
			}
		}
	}
	m.tracked = now
}

// Delivered observes the latency of a delivery, with its trace as the
// exemplar when it has one (commands.Observer).
func (m *Metrics) Delivered(target string, took time.Duration, traceID string) {
	h := m.latency.WithLabelValues(target)
	if traceID == "" {
		h.Observe(took.Seconds())
		return
	}
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(took.Seconds(), prometheus.Labels{"trace_id": traceID})
}

// orNop returns m, or unregistered metrics when m is nil, so callers need
// no nil checks.
func (m *Metrics) orNop() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
