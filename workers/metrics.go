package workers

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/lifecycle"
)

// Metrics are the runtime's counters. Labels are target names, outcome
// kinds and claim results only. Every series of a target exists, at zero,
// from the moment the runtime knows the target (Track), so a dashboard
// draws 0 rather than nothing.
type Metrics struct {
	attempts         *prometheus.CounterVec
	attemptSeconds   *prometheus.HistogramVec
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

// attemptOutcomes are the outcome labels of waybill_attempts_total: the
// outcome kinds, and a claim given back.
var attemptOutcomes = append(lifecycle.Strings(lifecycle.OutcomeKinds), "released")

// NewMetrics makes the metrics and registers them on reg; nil registers
// them nowhere.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_attempts_total", Help: "Attempts recorded, by target and outcome (delivered, awaiting_ack, retry, failed, released).",
		}, []string{"target", "outcome"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "waybill_attempt_duration_seconds", Help: "Time one attempt took, by target.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
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
		reg.MustRegister(m.attempts, m.attemptSeconds, m.claims, m.wakeupsPublished, m.wakeupsFailed, m.wakeupsDropped)
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
		for _, o := range attemptOutcomes {
			m.attempts.WithLabelValues(t, o)
		}
		m.attemptSeconds.WithLabelValues(t)
		m.claims.WithLabelValues(t, claimClaimed)
		m.claims.WithLabelValues(t, claimConflict)
		m.wakeupsPublished.WithLabelValues(t)
		m.wakeupsFailed.WithLabelValues(t)
		m.wakeupsDropped.WithLabelValues(t)
	}
	for t := range m.tracked {
		if !now[t] {
			for _, vec := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
				m.attempts, m.attemptSeconds, m.claims, m.wakeupsPublished, m.wakeupsFailed, m.wakeupsDropped,
			} {
				vec.DeletePartialMatch(prometheus.Labels{"target": t})
			}
		}
	}
	m.tracked = now
}

// orNop returns m, or unregistered metrics when m is nil, so callers need
// no nil checks.
func (m *Metrics) orNop() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
