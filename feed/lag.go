package feed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/journal"
)

// lagTimeout bounds the query a scrape runs.
const lagTimeout = 5 * time.Second

// lagSQL counts the committed events after the group's place, held back or
// not, and takes the recorded_at of the first of them in feed order, the
// next the group will consume. An open transaction that holds the feed back
// therefore shows as lag. With the place in a join, or the planner's guess
// of a third of the journal for the range, the count scanned the whole
// journal, so walkPlan turns scans that do not walk an index off for it.
var lagSQL = `SELECT ` + journal.LagSQL("o.last_processed_transaction_id", "o.offset_acked") + `
	FROM ` + offsetsTable + ` o WHERE o.consumer_group = $1`

// walkPlan turns off, for the rest of its transaction, the scans that do
// not walk an index in its order: the feed's reads must walk journal_txid
// from a group's place whatever the planner guesses of the range's size.
const walkPlan = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

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
	b := &pgx.Batch{}
	b.Queue(`BEGIN READ ONLY`)
	b.Queue(walkPlan)
	b.Queue(lagSQL, l.group).QueryRow(func(row pgx.Row) error {
		// A group without a place has consumed nothing yet, from nothing.
		if err := row.Scan(&n, &oldest); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
	b.Queue(`COMMIT`)
	if err := l.db.SendBatch(ctx, b).Close(); err != nil {
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

// Places returns the place of every consumer group that has one: none
// before the feed's first start has made its table.
func Places(ctx context.Context, q journal.Querier) (map[string]journal.Mark, error) {
	places := map[string]journal.Mark{}
	rows, err := q.Query(ctx, `SELECT to_regclass('`+offsetsTable+`') IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read the feed's places: %w", err)
	}
	exists, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if err != nil {
		return nil, fmt.Errorf("read the feed's places: %w", err)
	}
	if !exists {
		return places, nil
	}
	rows, err = q.Query(ctx, `SELECT consumer_group, last_processed_transaction_id::text, coalesce(offset_acked, 0) FROM `+offsetsTable)
	if err != nil {
		return nil, fmt.Errorf("read the feed's places: %w", err)
	}
	var (
		group, txid string
		position    int64
	)
	_, err = pgx.ForEachRow(rows, []any{&group, &txid, &position}, func() error {
		id, err := strconv.ParseUint(txid, 10, 64)
		if err != nil {
			return fmt.Errorf("group %s: txid %q: %w", group, txid, err)
		}
		places[group] = journal.Mark{TxID: id, Position: position}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the feed's places: %w", err)
	}
	return places, nil
}
