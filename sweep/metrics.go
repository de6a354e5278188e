package sweep

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	passSeconds     prometheus.Histogram
	rows            *prometheus.CounterVec
	deliveries      *prometheus.GaugeVec
	due             prometheus.Gauge
	oldestDue       *prometheus.GaugeVec
	journalPosition prometheus.Gauge

	mu sync.Mutex
	// targets are the targets the per-target gauges have series of.
	targets map[string]bool
	// The targets' health: 1 for each target's state, 0 for the others,
	// and its held deliveries.
	targetHealth *prometheus.GaugeVec
	targetHeld   *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "waybill_sweep_pass_duration_seconds", Help: "Time one sweep pass took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_sweep_rows_total", Help: "Deliveries a sweep step changed, by step.",
		}, []string{"step"}),
		deliveries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waybill_deliveries", Help: "Deliveries of the messages' current generations, by target and state, at the last sweep pass.",
		}, []string{"target", "state"}),
		due: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waybill_deliveries_due", Help: "Queued or retrying deliveries whose wake-up is due, at the last sweep pass.",
		}),
		oldestDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waybill_oldest_due_seconds", Help: "How long the target's most overdue wake-up has been due, at the last sweep pass; 0 when none is.",
		}, []string{"target"}),
		journalPosition: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waybill_journal_position", Help: "The journal's last position; its rate is the append rate.",
		}),
		targetHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waybill_target_health", Help: "1 for each target's health state (closed, open, half_open, throttled, disabled), 0 for the others, at the last sweep pass.",
		}, []string{"target", "state"}),
		targetHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waybill_target_held", Help: "A target's deliveries held while it may take none, at the last sweep pass.",
		}, []string{"target"}),
	}
	// Every step's series exists from the start, at zero.
	for _, step := range steps {
		m.rows.WithLabelValues(step)
	}
	m.targets = map[string]bool{}
	if reg != nil {
		reg.MustRegister(m.passSeconds, m.rows, m.deliveries, m.due, m.oldestDue, m.journalPosition, m.targetHealth, m.targetHeld)
	}
	return m
}

// steps names the steps of a pass, in their order.
var steps = []string{"expire_leases", "scheduled_due", "wake", "time_out_receipts", "release_blocked", "pass_lanes_on", "report_held_lanes"}

// track removes the per-target series of targets no longer among targets
// (deleted ones); the pass then sets those of each target.
func (m *metrics) track(targets []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := make(map[string]bool, len(targets))
	for _, t := range targets {
		now[t] = true
	}
	for t := range m.targets {
		if !now[t] {
			m.deliveries.DeletePartialMatch(prometheus.Labels{"target": t})
			m.oldestDue.DeleteLabelValues(t)
		}
	}
	m.targets = now
}
