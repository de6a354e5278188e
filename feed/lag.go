package feed

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// lagTimeout bounds the query a scrape runs.
const lagTimeout = 5 * time.Second

// lagSQL counts the committed events after the group's place, held back or
// not, and finds the oldest of them. An open transaction that holds the feed
// back therefore shows as lag.
const lagSQL = `SELECT count(j.position), min(j.recorded_at)
	FROM ` + offsetsTable + ` o
	JOIN journal j ON (j.txid, j.position) > (o.last_processed_transaction_id, o.offset_acked)
	WHERE o.consumer_group = $1`

// lag is the collector of one group's lag, measured when scraped.
type lag struct {
	db     *pgxpool.Pool
	group  string
	now    func() time.Time
	events *prometheus.Desc
	age    *prometheus.Desc
}

func newLag(db *pgxpool.Pool, group string, now func() time.Time) *lag {
	labels := prometheus.Labels{"group": group}
	return &lag{db: db, group: group, now: now,
		events: prometheus.NewDesc("waybill_feed_lag_events",
			"Journal events committed and not yet consumed by the group.", nil, labels),
		age: prometheus.NewDesc("waybill_feed_lag_seconds",
			"Age of the oldest journal event not yet consumed by the group, by its recorded_at; 0 when none.", nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (l *lag) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.events
	ch <- l.age
}

// Collect implements prometheus.Collector.
func (l *lag) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	var (
		n      int64
		oldest *time.Time
	)
	if err := l.db.QueryRow(ctx, lagSQL, l.group).Scan(&n, &oldest); err != nil {
		ch <- prometheus.NewInvalidMetric(l.events, err)
		ch <- prometheus.NewInvalidMetric(l.age, err)
		return
	}
	var age float64
	if oldest != nil {
		age = max(l.now().Sub(*oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(l.events, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(l.age, prometheus.GaugeValue, age)
}
