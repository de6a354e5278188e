package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
)

// journalPage reads one page of the journal after cursor.
func (b *bundle) journalPage(t *testing.T, cursor string, limit int) httpapi.JournalPage {
	t.Helper()
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var page httpapi.JournalPage
	b.as(t, readerToken, http.MethodGet, "/journal?"+q.Encode(), nil).want(t, http.StatusOK, &page)
	if page.NextCursor == "" {
		t.Fatal("no next_cursor")
	}
	return page
}

// appendAccepted writes a message.accepted event of a new stream in tx and
// returns its position.
func appendAccepted(t *testing.T, b *bundle, tx pgx.Tx) int64 {
	t.Helper()
	sum := sha256.Sum256(nil)
	stream := uuid.NewString()
	batch := &pgx.Batch{}
	err := journal.Queue(batch, journal.Event{RecordedAt: b.clock.Now(), Stream: stream, Version: 1, Actor: "source:erp",
		Payload: &journal.MessageAccepted{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain",
			PayloadSHA256: hex.EncodeToString(sum[:])}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.SendBatch(b.ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	var position int64
	if err := tx.QueryRow(b.ctx, `SELECT position FROM journal WHERE stream = $1`, stream).Scan(&position); err != nil {
		t.Fatal(err)
	}
	return position
}

func positions(page httpapi.JournalPage) []int64 {
	var out []int64
	for _, e := range page.Items {
		out = append(out, e.Position)
	}
	return out
}

func TestJournalPagesEveryEventOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	for range 3 {
		b.ingest(t, ingestToken, httpapi.IngestRequest{})
	}
	var want []int64
	rows, err := b.db.Query(b.ctx, `SELECT position FROM journal ORDER BY txid, position`)
	if err != nil {
		t.Fatal(err)
	}
	want, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 9 { // a target and its key, a route, 3 × (accepted, dispatched)
		t.Fatalf("%d events", len(want))
	}

	// A page may end early while a transaction of another test is open:
	// transaction ids are the whole server's. Read on until all came.
	var items []httpapi.JournalEvent
	cursor := ""
	testpoll.Until(t, fmt.Sprintf("the %d events paged", len(want)), func() bool {
		page := b.journalPage(t, cursor, 3)
		if len(page.Items) == 0 && page.NextCursor != cursor && cursor != "" {
			t.Errorf("an empty page moved the cursor from %q to %q", cursor, page.NextCursor)
		}
		items = append(items, page.Items...)
		if len(page.Items) > 0 {
			cursor = page.NextCursor
		}
		return len(items) >= len(want)
	})
	if rest := b.journalPage(t, cursor, 3); len(rest.Items) != 0 {
		t.Errorf("more after the last event: %v", positions(rest))
	}
	got := positions(httpapi.JournalPage{Items: items})
	if !slices.Equal(got, want) {
		t.Fatalf("pages gave %v, want %v", got, want)
	}

	// The items are the events, payload included.
	for _, it := range items {
		if _, err := journal.Decode(it.Kind, it.Payload); err != nil {
			t.Errorf("position %d: %v", it.Position, err)
		}
	}
	first := items[0]
	if first.Kind != journal.KindTargetCreated || first.Stream != journal.ConfigStream || first.Version != 1 ||
		first.Actor != "operator:alice" || first.Text != "target created: billing" || first.DeliveryID != nil ||
		!first.At.Equal(start) || len(first.Payload) == 0 {
		t.Errorf("first event %+v", first)
	}
	b.as(t, readerToken, http.MethodGet, "/journal?cursor=abc", nil).invalidField(t, "cursor")
	b.as(t, readerToken, http.MethodGet, "/journal?limit=1001", nil).invalidField(t, "limit")
	b.as(t, readerToken, http.MethodGet, "/journal?after=1", nil).invalidField(t, "after")
}

// TestJournalCursorWaitsForLateCommits holds open a transaction whose event
// has a lower position than one another transaction commits: a page stops
// before it, and the cursor delivers it once it commits.
func TestJournalCursorWaitsForLateCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cursor := b.journalPage(t, "", 10).NextCursor

	// early takes its transaction id first and writes last; late writes
	// first, so its event has the lower position, and commits last.
	early, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback(b.ctx)
	if _, err := early.Exec(b.ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	late, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(b.ctx)
	latePos := appendAccepted(t, b, late)
	earlyPos := appendAccepted(t, b, early)
	if earlyPos <= latePos {
		t.Fatalf("positions %d and %d", latePos, earlyPos)
	}
	if err := early.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}

	// until reads from cursor until the event at position shows; the
	// snapshot's xmin may lag while other tests' transactions end.
	until := func(position int64) httpapi.JournalPage {
		t.Helper()
		var page httpapi.JournalPage
		testpoll.Until(t, fmt.Sprintf("position %d after cursor %q", position, cursor), func() bool {
			page = b.journalPage(t, cursor, 10)
			return slices.Contains(positions(page), position)
		})
		return page
	}
	page := until(earlyPos)
	if got := positions(page); !slices.Equal(got, []int64{earlyPos}) {
		t.Fatalf("page %v while position %d is uncommitted, want [%d]", got, latePos, earlyPos)
	}
	cursor = page.NextCursor
	if got := positions(b.journalPage(t, cursor, 10)); len(got) != 0 {
		t.Fatalf("page %v while position %d is uncommitted", got, latePos)
	}

	if err := late.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := positions(until(latePos)); !slices.Equal(got, []int64{latePos}) {
		t.Errorf("after the commit the page is %v, want [%d]", got, latePos)
	}
}
