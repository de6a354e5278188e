package workers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the runtime's counters. Labels are target names and outcome
// kinds only.
type Metrics struct {
	attempts         *prometheus.CounterVec
	attemptSeconds   *prometheus.HistogramVec
	claimConflicts   *prometheus.CounterVec
	wakeupsPublished *prometheus.CounterVec
	wakeupsFailed    *prometheus.CounterVec
	wakeupsDropped   *prometheus.CounterVec
}

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
		claimConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_claim_conflicts_total", Help: "Wake-ups whose delivery was not claimable any more (claimed elsewhere, settled, not due).",
		}, []string{"target"}),
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
		reg.MustRegister(m.attempts, m.attemptSeconds, m.claimConflicts, m.wakeupsPublished, m.wakeupsFailed, m.wakeupsDropped)
	}
	return m
}

// orNop returns m, or unregistered metrics when m is nil, so callers need
// no nil checks.
func (m *Metrics) orNop() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
