package journal_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// appendEvents appends versions from through to of streams, one event of
// each stream per version, so every stream's events are spread over the
// journal.
func appendEvents(t *testing.T, db *pgxpool.Pool, streams []uuid.UUID, from, to int, at time.Time) {
	t.Helper()
	for v := from; v <= to; v++ {
		var b pgx.Batch
		for _, s := range streams {
			e := journal.Event{RecordedAt: at.Add(time.Duration(v) * time.Second), Stream: journal.MessageStream(s),
				Version: v, Actor: "source:erp", Payload: &journal.MessageDispatched{}}
			if v == 1 {
				e.Payload = &journal.MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain",
					PayloadSize: int64(v), PayloadSHA256: strings.Repeat("ab", 32)}
			}
			if err := journal.Queue(&b, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SendBatch(t.Context(), &b).Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// shared begins n read-only transactions on n connections of db that share
// the first one's snapshot, and returns them with the function that ends
// them.
func shared(t *testing.T, db *pgxpool.Pool, n int) ([]journal.Querier, func()) {
	t.Helper()
	var (
		qs    []journal.Querier
		conns []*pgxpool.Conn
		id    string
	)
	end := func() {
		for i, c := range conns {
			if i < len(qs) {
				_ = qs[i].(pgx.Tx).Rollback(context.Background())
			}
			c.Release()
		}
		conns, qs = nil, nil
	}
	t.Cleanup(end)
	for i := range n {
		conn, err := db.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		tx, err := conn.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, tx)
		if i == 0 {
			err = tx.QueryRow(t.Context(), `SELECT pg_export_snapshot()`).Scan(&id)
		} else {
			_, err = tx.Exec(t.Context(), `SET TRANSACTION SNAPSHOT '`+id+`'`)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return qs, end
}

func scanAll(t *testing.T, db *pgxpool.Pool) []journal.Event {
	t.Helper()
	var all []journal.Event
	if err := journal.Scan(t.Context(), db, 1, func(e journal.Event) error {
		all = append(all, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return all
}

// TestScanRangesReadsInPositionOrder reads a journal whose streams are
// interleaved, with a gap a rolled-back append left, in runs of every size
// on one to four connections: fn must see exactly what one Scan sees.
func TestScanRangesReadsInPositionOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	streams := []uuid.UUID{uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()}
	appendEvents(t, db, streams[:3], 1, 2, at)
	// A rolled-back append leaves positions unused.
	tx, err := db.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var b pgx.Batch
	for range 2 {
		if err := journal.Queue(&b, journal.Event{RecordedAt: at, Stream: journal.MessageStream(uuid.New()), Version: 1,
			Actor: "system", Payload: &journal.MessageRefused{Refusal: lifecycle.RefusalRejected, Reason: "x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.SendBatch(t.Context(), &b).Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, streams[:3], 3, 6, at)
	appendEvents(t, db, streams[3:], 1, 4, at)

	want := scanAll(t, db)
	last := want[len(want)-1].Position
	if len(want) != 26 || last != 28 {
		t.Fatalf("setup: %d events, the last at %d", len(want), last)
	}
	for conns := 1; conns <= 4; conns++ {
		for _, chunk := range []int64{1, 2, 3, 5, 7, 13, 100} {
			qs, end := shared(t, db, conns)
			var got []journal.Event
			err := journal.ScanRanges(t.Context(), qs, 1, last, chunk, func(e journal.Event) error {
				got = append(got, e)
				return nil
			})
			end()
			if err != nil {
				t.Fatalf("%d connections, chunk %d: %v", conns, chunk, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%d connections, chunk %d: %d events, want %d, or not in order", conns, chunk, len(got), len(want))
			}
		}
	}
	// From and to bound the positions; 7 and 8 are the gap.
	var got []int64
	qs, end := shared(t, db, 2)
	err = journal.ScanRanges(t.Context(), qs, 6, 12, 2, func(e journal.Event) error {
		got = append(got, e.Position)
		return nil
	})
	end()
	if err != nil || fmt.Sprint(got) != "[6 9 10 11 12]" {
		t.Fatalf("positions 6 to 12: %v, %v", got, err)
	}
}

// TestScanRangesStopsAtTheFirstError puts an undecodable event in the
// middle: fn sees every event before it, in order, and the error names its
// position, whichever connection read it. An error of fn stops the scan
// too.
func TestScanRangesStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	streams := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	appendEvents(t, db, streams, 1, 3, at)
	var bad int64
	if err := db.QueryRow(t.Context(), `INSERT INTO journal (recorded_at, stream, version, delivery_id, target, kind, actor,
		old_state, new_state, payload) VALUES ($1, $2, 4, $3, 'alpha', 'delivery.claimed', 'worker:alpha', 'queued',
		'delivering', '{}') RETURNING position`, at, streams[0].String(), uuid.New()).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, db, []uuid.UUID{uuid.New(), uuid.New()}, 1, 3, at)
	for conns := 1; conns <= 3; conns++ {
		for _, chunk := range []int64{1, 2, 4, 50} {
			var got []int64
			qs, end := shared(t, db, conns)
			err := journal.ScanRanges(t.Context(), qs, 1, 16, chunk, func(e journal.Event) error {
				got = append(got, e.Position)
				return nil
			})
			end()
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("position %d:", bad)) {
				t.Fatalf("%d connections, chunk %d: error %v, want one at position %d", conns, chunk, err, bad)
			}
			if fmt.Sprint(got) != "[1 2 3 4 5 6 7 8 9]" {
				t.Fatalf("%d connections, chunk %d: read %v before the error", conns, chunk, got)
			}
		}
	}
	stop := errors.New("stop")
	var n int
	qs, _ := shared(t, db, 3)
	err := journal.ScanRanges(t.Context(), qs, 1, 9, 1, func(e journal.Event) error {
		if n++; e.Position == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 5 {
		t.Fatalf("fn's error: %v after %d events", err, n)
	}
}

// TestDecodeFastReadsTheJournal appends a payload of every kind with a fast
// decoder and reads it back as PostgreSQL gives it: the fast decoder must
// take every one, or the audit is slow for nothing.
func TestDecodeFastReadsTheJournal(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	var b pgx.Batch
	for _, p := range journal.FastSamples() {
		e := journal.Event{RecordedAt: time.Now(), Stream: journal.MessageStream(uuid.New()), Version: 1, Actor: "system", Payload: p}
		if p.Kind().Delivery() {
			e.DeliveryID, e.Target, e.OldState, e.NewState = uuid.New(), "alpha", lifecycle.StateQueued, lifecycle.StateQueued
		}
		if err := journal.Queue(&b, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SendBatch(t.Context(), &b).Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(t.Context(), `SELECT kind, payload FROM journal ORDER BY position`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var (
			kind    journal.Kind
			payload []byte
		)
		if err := rows.Scan(&kind, &payload); err != nil {
			t.Fatal(err)
		}
		n++
		if !journal.DecodesFast(kind, payload) {
			t.Errorf("%s %s: the fast decoder gives up", kind, payload)
		}
	}
	if rows.Err() != nil || n != len(journal.FastSamples()) {
		t.Fatalf("%d payloads read: %v", n, rows.Err())
	}
}

// TestScanReadsTheSameInEveryQueryMode reads one journal in every query
// mode of pgx: the raw rows it decodes itself where the columns come in
// binary, and pgx's Scan where they do not (the simple protocol, for one),
// must give the same events. It does so for both types of the payload
// column: json, and jsonb, as a journal created by an earlier build has it.
func TestScanReadsTheSameInEveryQueryMode(t *testing.T) {
	t.Parallel()
	for _, payloadType := range []string{"json", "jsonb"} {
		t.Run(payloadType, func(t *testing.T) {
			t.Parallel()
			scanEveryQueryMode(t, payloadType)
		})
	}
}

func scanEveryQueryMode(t *testing.T, payloadType string) {
	url := dbtest.URL(t)
	db, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := schema.Ensure(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(t.Context(), `ALTER TABLE journal ALTER COLUMN payload TYPE `+payloadType+
		` USING payload::`+payloadType); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.FixedZone("", 3600))
	var b pgx.Batch
	for i, p := range journal.FastSamples() {
		e := journal.Event{RecordedAt: at.Add(time.Duration(i) * 1001 * time.Microsecond), Stream: journal.MessageStream(uuid.New()),
			Version: i + 1, Actor: []string{"system", "worker:alpha", "operator:ann"}[i%3], Payload: p}
		if p.Kind().Delivery() {
			e.DeliveryID, e.Target, e.OldState, e.NewState = uuid.New(), "alpha", lifecycle.StateQueued, lifecycle.StateDelivering
		}
		if err := journal.Queue(&b, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := journal.Queue(&b, journal.Event{RecordedAt: at, Stream: journal.ConfigStream, Version: 1, Actor: "operator:ann",
		Payload: &journal.RouteDeleted{ID: uuid.New()}}); err != nil {
		t.Fatal(err)
	}
	// A payload the fast decoder leaves to encoding/json.
	if err := journal.Queue(&b, journal.Event{RecordedAt: at, Stream: journal.MessageStream(uuid.New()), Version: 1, Actor: "system",
		Payload: &journal.MessageRefused{Refusal: lifecycle.RefusalRejected, Reason: `said "no"`}}); err != nil {
		t.Fatal(err)
	}
	if err := db.SendBatch(t.Context(), &b).Close(); err != nil {
		t.Fatal(err)
	}
	want := scanAll(t, db)
	if len(want) != len(journal.FastSamples())+2 {
		t.Fatalf("%d events", len(want))
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.DefaultQueryExecMode = mode
		other, err := pgxpool.NewWithConfig(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		got := scanAll(t, other)
		other.Close()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v: %d events differ", mode, len(got))
			for i := range min(len(got), len(want)) {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("%#v\nwant %#v", got[i], want[i])
				}
			}
		}
	}
}

func TestStreamAfterReadsTheVersionsAfter(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	streams := []uuid.UUID{uuid.New(), uuid.New()}
	appendEvents(t, db, streams, 1, 4, time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	for _, after := range []int{0, 1, 3, 4, 9} {
		events, err := journal.StreamAfter(t.Context(), db, journal.MessageStream(streams[1]), after)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, e := range events {
			if e.Stream != journal.MessageStream(streams[1]) {
				t.Fatalf("after %d: an event of stream %s", after, e.Stream)
			}
			got = append(got, e.Version)
		}
		var want []int
		for v := after + 1; v <= 4; v++ {
			want = append(want, v)
		}
		if !slices.Equal(got, want) {
			t.Errorf("after %d: versions %v, want %v", after, got, want)
		}
	}
}

// TestStreamsReadsEachWhole: Streams gives each stream asked for, whole and
// in version order, as Stream does, and nothing for a stream with no event.
func TestStreamsReadsEachWhole(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	appendEvents(t, db, ids[:2], 1, 4, time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	none, err := journal.Streams(t.Context(), db, nil)
	if err != nil || len(none) != 0 {
		t.Fatalf("no streams: %v, %v", none, err)
	}
	asked := []string{journal.MessageStream(ids[1]), journal.MessageStream(ids[2]), journal.MessageStream(ids[0])}
	got, err := journal.Streams(t.Context(), db, asked)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[asked[1]] != nil {
		t.Fatalf("streams read: %d, the empty one %v", len(got), got[asked[1]])
	}
	for _, id := range ids[:2] {
		want, err := journal.Stream(t.Context(), db, journal.MessageStream(id))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[journal.MessageStream(id)], want) {
			t.Errorf("stream %s: %+v, want %+v", id, got[journal.MessageStream(id)], want)
		}
	}
}
