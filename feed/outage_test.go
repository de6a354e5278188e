package feed_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
)

// TestFeedOutlastsADatabaseOutage: the database goes away while the handler
// holds a read, so the place of what it acked cannot be saved, and events
// are committed meanwhile. Once the database is back the consumer resumes
// by itself: every event is handled, none skipped, the unsaved ones again,
// and the group's saved place never goes back.
func TestFeedOutlastsADatabaseOutage(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	proxy := dbtest.NewProxy(t, db)
	var (
		mu      sync.Mutex
		handled []int64
		// hold, when set, is the position the handler stops at until
		// release is closed; held is closed when it gets there.
		hold          int64
		held, release chan struct{}
	)
	handle := func(ctx context.Context, events []journal.Event) error {
		for _, e := range events {
			mu.Lock()
			handled = append(handled, e.Position)
			stop := e.Position == hold
			if stop {
				hold = 0 // once
			}
			mu.Unlock()
			if stop {
				close(held)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	seen := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(handled)
	}
	// The consumer reaches the database through the proxy; the test does
	// not.
	c := start(t, feed.Config{DB: proxy.Pool(t), Group: "outage", Handle: handle})

	positions := func() []int64 {
		rows, err := db.Query(t.Context(), `SELECT position FROM journal ORDER BY txid, position`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var all []int64
		for rows.Next() {
			var p int64
			if err := rows.Scan(&p); err != nil {
				t.Fatal(err)
			}
			all = append(all, p)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return all
	}
	// place reads the group's saved place and fails the test when it went
	// back since the last read.
	var lastTxid, lastPosition int64
	place := func() int64 {
		var txid, position int64
		err := db.QueryRow(t.Context(), `SELECT last_processed_transaction_id::text::bigint, offset_acked
			FROM feed_offsets WHERE consumer_group = 'outage'`).Scan(&txid, &position)
		if err != nil {
			t.Fatal(err)
		}
		if txid < lastTxid || txid == lastTxid && position < lastPosition {
			t.Fatalf("the saved place went back from (%d, %d) to (%d, %d)", lastTxid, lastPosition, txid, position)
		}
		lastTxid, lastPosition = txid, position
		return position
	}

	appendEvents(t, db, 10)
	first := positions()
	testpoll.Until(t, "the first events handled and their place saved", func() bool {
		return place() == first[len(first)-1]
	})

	// The handler holds the next read open while the database goes away.
	mu.Lock()
	hold, held, release = first[len(first)-1]+1, make(chan struct{}), make(chan struct{})
	mu.Unlock()
	appendEvents(t, db, 10)
	<-held
	proxy.Cut()
	close(release)
	appendEvents(t, db, 10)
	// The consumer keeps trying while the database is away.
	refused := proxy.Refused()
	testpoll.Until(t, "the consumer to try again", func() bool { return proxy.Refused() >= refused+3 })
	place()

	proxy.Restore()
	all := positions()
	testpoll.Until(t, "every event handled and its place saved", func() bool {
		return place() == all[len(all)-1]
	})
	c.settle(t)

	got := seen()
	// Handled again from the first unsaved one on; in order, none skipped.
	var once []int64
	for _, p := range got {
		if !slices.Contains(once, p) {
			once = append(once, p)
		}
	}
	if !slices.Equal(once, all) {
		t.Fatalf("handled %v, want %v in this order", once, all)
	}
	if n := len(got) - len(once); n == 0 {
		t.Errorf("no event handled again, though the place of the held read was never saved")
	}
}
