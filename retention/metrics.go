package retention

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	expunged     prometheus.Counter
	removed      *prometheus.CounterVec
	archiveBytes prometheus.Counter
	alerts       prometheus.Counter
	oldest       *prometheus.GaugeVec
	passSeconds  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		expunged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waybill_retention_expunged_total", Help: "Payloads retention expunged.",
		}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_retention_removed_total", Help: "Messages retention archived and removed, by class: settled (settled_after) or faulted (failed_after).",
		}, []string{"class"}),
		archiveBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waybill_retention_archive_bytes_total", Help: "Bytes of archive files retention wrote.",
		}),
		alerts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waybill_retention_alerts_removed_total", Help: "Sent alerts retention deleted.",
		}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waybill_retention_oldest_settled_seconds", Help: "Age of the oldest settled message still live, by its creation and class (settled, or faulted); 0 when there is none.",
		}, []string{"class"}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "waybill_retention_pass_duration_seconds", Help: "Time one retention pass took.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	for _, class := range []string{classSettled, classFaulted} {
		m.removed.WithLabelValues(class)
		m.oldest.WithLabelValues(class)
	}
	if reg != nil {
		reg.MustRegister(m.expunged, m.removed, m.archiveBytes, m.alerts, m.oldest, m.passSeconds)
	}
	return m
}
