package sweep

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	passSeconds     prometheus.Histogram
	rows            *prometheus.CounterVec
	deliveries      *prometheus.GaugeVec
	due             prometheus.Gauge
	oldestDue       prometheus.Gauge
	journalPosition prometheus.Gauge
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
			Name: "waybill_deliveries", Help: "Deliveries per state, at the last sweep pass.",
		}, []string{"state"}),
		due: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waybill_deliveries_due", Help: "Queued or retrying deliveries whose wake-up is due, at the last sweep pass.",
		}),
		oldestDue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waybill_deliveries_oldest_due_seconds", Help: "How long the most overdue wake-up has been due, at the last sweep pass.",
		}),
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
	if reg != nil {
		reg.MustRegister(m.passSeconds, m.rows, m.deliveries, m.due, m.oldestDue, m.journalPosition, m.targetHealth, m.targetHeld)
	}
	return m
}

// steps names the steps of a pass, in their order.
var steps = []string{"expire_leases", "wake", "time_out_receipts", "release_blocked", "report_held_lanes"}
