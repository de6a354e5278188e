package intake

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// Metrics are the sources' series, labelled by source name only. Every
// series of a source exists, at zero, from the moment the runtime knows the
// source (Track). The gauges are this process's view: a process that does
// not hold a source's lease shows them at zero, so a sum over processes is
// the source's.
type Metrics struct {
	taken       *prometheus.CounterVec
	errors      *prometheus.CounterVec
	backlog     *prometheus.GaugeVec
	lag         *prometheus.GaugeVec
	catchUp     *prometheus.GaugeVec
	markersOwed *prometheus.GaugeVec

	mu      sync.Mutex
	tracked map[string]string // name → kind
}

// NewMetrics makes the metrics and registers them on reg; nil registers
// them nowhere.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"source"})
	}
	m := &Metrics{
		taken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_source_messages_total",
			Help: "Messages a source took in, by source; a file or row found stored already is not counted.",
		}, []string{"source"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_source_errors_total",
			Help: "Failures of a source, by source: a poll that failed (the directory or a database away), a file moved to the error folder, a row that cannot be taken, markers not written.",
		}, []string{"source"}),
		backlog: gauge("waybill_source_backlog",
			"What a source has still to take, at its last poll: files waiting (directory), rows behind the highest taken (inbox_table)."),
		lag: gauge("waybill_source_lag_seconds",
			"How long the oldest thing a source has still to take has been waiting, at its last poll; for an inbox_table source, the oldest unread row's age."),
		catchUp: gauge("waybill_source_catch_up_seconds",
			"The backlog divided by the recent rate of taking, at a source's last poll: the estimated time to catch up; +Inf while nothing is taken."),
		markersOwed: gauge("waybill_source_markers_owed",
			"Processed markers an inbox_table source owes its table, at its last poll."),
		tracked: map[string]string{},
	}
	if reg != nil {
		reg.MustRegister(m.taken, m.errors, m.backlog, m.lag, m.catchUp, m.markersOwed)
	}
	return m
}

// Track makes every series of the sources exist, at zero where new, and
// removes those of sources no longer among them.
func (m *Metrics) Track(all []lifecycle.Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := make(map[string]string, len(all))
	for _, s := range all {
		now[s.Name] = s.Kind
		if m.tracked[s.Name] == s.Kind {
			continue
		}
		m.remove(s.Name)
		for _, vec := range []interface {
			WithLabelValues(...string) prometheus.Counter
		}{m.taken, m.errors} {
			vec.WithLabelValues(s.Name)
		}
		for _, vec := range []*prometheus.GaugeVec{m.backlog, m.lag, m.catchUp} {
			vec.WithLabelValues(s.Name)
		}
		if s.Kind == sources.KindInboxTable {
			m.markersOwed.WithLabelValues(s.Name)
		}
	}
	for name := range m.tracked {
		if _, ok := now[name]; !ok {
			m.remove(name)
		}
	}
	m.tracked = now
}

func (m *Metrics) remove(name string) {
	for _, vec := range []interface{ DeleteLabelValues(...string) bool }{
		m.taken, m.errors, m.backlog, m.lag, m.catchUp, m.markersOwed,
	} {
		vec.DeleteLabelValues(name)
	}
}

// idle sets the gauges of a source this process does not poll to zero.
func (m *Metrics) idle(name string, kind string) {
	for _, vec := range []*prometheus.GaugeVec{m.backlog, m.lag, m.catchUp} {
		vec.WithLabelValues(name).Set(0)
	}
	if kind == sources.KindInboxTable {
		m.markersOwed.WithLabelValues(name).Set(0)
	}
}

// orNop returns m, or unregistered metrics when m is nil.
func (m *Metrics) orNop() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
