package feed_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
)

// told reports whether w was told of new events, without waiting.
func told(w *feed.Watch) bool {
	select {
	case <-w.C:
		return true
	default:
		return false
	}
}

// TestTailTellsTheWatchersOfAStream: a commit reaches the watchers of its
// stream, and only them, through the one reader of the process.
func TestTailTellsTheWatchersOfAStream(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	// Events committed before the first watch are the watcher's to read:
	// the tail starts after them.
	before := appendEvents(t, db, 3)
	tail := feed.NewTail(db, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	t.Cleanup(tail.Stop)

	b := &pgx.Batch{}
	x, y := queueAccepted(t, b), queueAccepted(t, b)
	if err := db.SendBatch(t.Context(), b).Close(); err != nil {
		t.Fatal(err)
	}
	wx, err := tail.Watch(t.Context(), x)
	if err != nil {
		t.Fatal(err)
	}
	wx2, err := tail.Watch(t.Context(), x)
	if err != nil {
		t.Fatal(err)
	}
	wy, err := tail.Watch(t.Context(), y)
	if err != nil {
		t.Fatal(err)
	}
	wOld, err := tail.Watch(t.Context(), before[0])
	if err != nil {
		t.Fatal(err)
	}
	defer wOld.Close()

	// The tests of other packages share the server, whose open
	// transactions may hold the horizon below the events committed before
	// the watches: those may be told once. The tail reads in commit
	// order, so once a later commit of y is told, they are.
	commit(t, db, y, 2)
	testpoll.Until(t, "the watcher of y is told", func() bool { return told(wy) })
	told(wx)
	told(wx2)
	told(wOld)
	// y moves alone: its watcher is told, x's are not.
	commit(t, db, y, 3)
	testpoll.Until(t, "the watcher of y is told again", func() bool { return told(wy) })
	if told(wx) || told(wx2) || told(wOld) {
		t.Fatal("a watcher of another stream was told")
	}
	// x moves: both its watchers are told, once for its two commits if
	// they were not taken between.
	commit(t, db, x, 2)
	commit(t, db, x, 3)
	testpoll.Until(t, "the first watcher of x is told", func() bool { return told(wx) })
	testpoll.Until(t, "the second watcher of x is told", func() bool { return told(wx2) })
	// A closed watch is told nothing; the other still is.
	wx2.Close()
	wx2.Close()
	commit(t, db, x, 4)
	testpoll.Until(t, "the open watcher of x is told", func() bool { return told(wx) })
	if told(wx2) || told(wOld) {
		t.Fatal("a closed watcher, or one of an old stream, was told")
	}
	wx.Close()
	wy.Close()
}

// commit appends version v of stream in a transaction of its own.
func commit(t *testing.T, db *pgxpool.Pool, stream string, v int) {
	t.Helper()
	b := &pgx.Batch{}
	if err := journal.Queue(b, journal.Event{RecordedAt: recordedAt, Stream: stream, Version: v,
		Actor: journal.SourceActor("erp"), Payload: &journal.MessageDispatched{}}); err != nil {
		t.Fatal(err)
	}
	if err := db.SendBatch(t.Context(), b).Close(); err != nil {
		t.Fatal(err)
	}
}
