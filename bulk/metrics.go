package bulk

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	running  prometheus.Gauge
	messages *prometheus.CounterVec
}

// The results a message taken by an operation counts under.
const (
	resultDone    = "done"
	resultRefused = "refused"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waybill_operations_running", Help: "Bulk operations running, at the runner's last look.",
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_operation_messages_total",
			Help: "Messages this process's runner took for bulk operations, by result: done (acted on) or refused; a batch whose commit went unconfirmed is not counted.",
		}, []string{"result"}),
	}
	// Both series exist from the start, at zero.
	m.messages.WithLabelValues(resultDone)
	m.messages.WithLabelValues(resultRefused)
	if reg != nil {
		reg.MustRegister(m.running, m.messages)
	}
	return m
}
