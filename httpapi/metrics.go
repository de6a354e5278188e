package httpapi

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics measures the requests by route pattern and status code, and
// counts the receipts by receiver's id by what came of them.
type metrics struct {
	duration *prometheus.HistogramVec
	receipts *prometheus.CounterVec
	// refused counts the webhook requests refused, by source and reason
	// (sources.RefusedReasons).
	refused *prometheus.CounterVec
}

// The results of a receipt by receiver's id, as waybill_receipts_total
// counts them: unknown and consumed ids change nothing.
const (
	receiptSettled      = "settled"
	receiptRefused      = "refused"
	receiptIntermediate = "intermediate"
	receiptUnknown      = "unknown"
	receiptConsumed     = "consumed"
)

var receiptResults = []string{receiptSettled, receiptRefused, receiptIntermediate, receiptUnknown, receiptConsumed}

// unmatchedRoute is the route label of a request no route serves.
const unmatchedRoute = "unmatched"

// newMetrics registers the metrics on reg, or on nothing when reg is nil.
// A second Server on one registry shares the first one's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "waybill_http_request_duration_seconds",
		Help:    "Time to answer an API request, by route pattern and status code; its _count is the number of requests.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"route", "code"}),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_receipts_total",
			Help: "Receipts posted by a receiver's id (POST /receipts), by result: settled, refused (journaled), intermediate, and unknown or consumed ids, which change nothing.",
		}, []string{"result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waybill_ingest_refused_total",
			Help: "Webhook requests refused, by source and reason: missing_header, timestamp, signature. Nothing of them is stored.",
		}, []string{"source", "reason"})}
	for _, r := range receiptResults {
		m.receipts.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.receipts, err = register(reg, m.receipts); err != nil {
		return nil, err
	}
	if m.refused, err = register(reg, m.refused); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c on reg, or returns the collector of its name
// registered already.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return c, err
		}
		return are.ExistingCollector.(C), nil
	}
	return c, nil
}

func (m *metrics) observe(pattern string, code int, d time.Duration) {
	if pattern == "" {
		pattern = unmatchedRoute
	}
	m.duration.WithLabelValues(pattern, strconv.Itoa(code)).Observe(d.Seconds())
}
