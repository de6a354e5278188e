package httpapi

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics measures the requests by route pattern and status code.
type metrics struct {
	duration *prometheus.HistogramVec
}

// unmatchedRoute is the route label of a request no route serves.
const unmatchedRoute = "unmatched"

// newMetrics registers the metrics on reg, or on nothing when reg is nil.
// A second Server on one registry shares the first one's.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "waybill_http_request_duration_seconds",
		Help:    "Time to answer an API request, by route pattern and status code; its _count is the number of requests.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"route", "code"})}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m.duration); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.duration = are.ExistingCollector.(*prometheus.HistogramVec)
	}
	return m, nil
}

func (m *metrics) observe(pattern string, code int, d time.Duration) {
	if pattern == "" {
		pattern = unmatchedRoute
	}
	m.duration.WithLabelValues(pattern, strconv.Itoa(code)).Observe(d.Seconds())
}
