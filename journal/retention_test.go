package journal_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// TestJournalRemovalNeedsItsRecord: a DELETE of the journal stands only in
// a transaction that first appended the retention.archived event counting
// exactly the events and messages it deletes, with their first and last
// positions; any other DELETE, an UPDATE and a TRUNCATE are refused, and
// so is a record that would take an event of the config stream or of a
// bulk operation's.
func TestJournalRemovalNeedsItsRecord(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	gone, kept := []uuid.UUID{uuid.New(), uuid.New()}, []uuid.UUID{uuid.New()}
	appendEvents(t, db, append(append([]uuid.UUID{}, gone...), kept...), 1, 3, at)
	streams := []string{gone[0].String(), gone[1].String()}
	events, marks, err := journal.ReadStreams(t.Context(), db, streams)
	if err != nil || len(events) != 6 || len(marks) != 6 {
		t.Fatalf("read %d events, %d marks: %v", len(events), len(marks), err)
	}
	for i, e := range events {
		if i > 0 && e.Position <= events[i-1].Position || marks[i].Position != e.Position || marks[i].TxID == 0 {
			t.Fatalf("event %d at %d, mark %+v", i, e.Position, marks[i])
		}
	}
	record := func(version int, n, messages int, lo, hi int64) journal.Event {
		return journal.Event{RecordedAt: at, Stream: journal.RetentionStream, Version: version, Actor: journal.ActorRetention,
			Payload: &journal.RetentionArchived{Archive: uuid.New(), Batch: int64(version), File: "batch-1.jsonl.gz",
				SHA256: strings.Repeat("ab", 32), Bytes: 10, Manifest: "batch-1.manifest.json", ManifestSHA256: strings.Repeat("cd", 32),
				Messages: messages, Events: n, FirstPosition: lo, LastPosition: hi, Settled: messages,
				Total: journal.RetentionTotal{Messages: int64(messages), Events: int64(n), Settled: int64(messages)}}}
	}
	remove := func(records ...journal.Event) error {
		return pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
			var b pgx.Batch
			if err := journal.Queue(&b, records...); err != nil {
				return err
			}
			journal.QueueRemoval(&b, streams, nil)
			return tx.SendBatch(t.Context(), &b).Close()
		})
	}
	refused := func(what string, err error) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23001" {
			t.Errorf("%s: %v, want the journal's refusal", what, err)
		}
	}
	lo, hi := events[0].Position, events[5].Position
	refused("no record", remove())
	refused("a count short", remove(record(1, 5, 2, lo, hi)))
	refused("messages wrong", remove(record(1, 6, 1, lo, hi)))
	refused("positions wrong", remove(record(1, 6, 2, lo, hi+1)))
	for _, sql := range []string{`DELETE FROM journal`, `UPDATE journal SET actor = 'system'`, `TRUNCATE journal`} {
		_, err := db.Exec(t.Context(), sql)
		refused(sql, err)
	}
	if err := remove(record(1, 6, 2, lo, hi)); err != nil {
		t.Fatalf("removal with its record: %v", err)
	}
	if left, _, err := journal.ReadStreams(t.Context(), db, streams); err != nil || len(left) != 0 {
		t.Fatalf("%d events left, %v", len(left), err)
	}
	if left, _, _ := journal.ReadStreams(t.Context(), db, []string{kept[0].String()}); len(left) != 3 {
		t.Errorf("%d events of the kept stream, want 3", len(left))
	}

	// Retention's own older records may leave, counted as records.
	first, _, err := journal.ReadRecords(t.Context(), db, 2, at, 10)
	if err != nil || len(first) != 1 {
		t.Fatalf("records: %d, %v", len(first), err)
	}
	p := first[0].Position
	removeRecords := func(r journal.Event) error {
		return pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
			var b pgx.Batch
			if err := journal.Queue(&b, r); err != nil {
				return err
			}
			journal.QueueRemoval(&b, []string{kept[0].String()}, []int64{p})
			return tx.SendBatch(t.Context(), &b).Close()
		})
	}
	keptEvents, _, _ := journal.ReadStreams(t.Context(), db, []string{kept[0].String()})
	withRecord := record(2, 4, 1, min(p, keptEvents[0].Position), max(p, keptEvents[2].Position))
	refused("a record not counted", removeRecords(withRecord))
	withRecord.Payload.(*journal.RetentionArchived).Records = 1
	if err := removeRecords(withRecord); err != nil {
		t.Fatalf("removal of a record: %v", err)
	}

	// Neither the config stream nor an operation's ever leaves.
	operation := journal.OperationStream(uuid.New())
	for _, e := range []journal.Event{
		{RecordedAt: at, Stream: journal.ConfigStream, Version: 1, Actor: "operator:ops",
			Payload: &journal.SettingsChanged{Settings: lifecycle.DefaultSettings()}},
		{RecordedAt: at, Stream: operation, Version: 1, Actor: "operator:ops",
			Payload: &journal.OperationCreated{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}}},
	} {
		if err := pgx.BeginFunc(t.Context(), db, func(tx pgx.Tx) error {
			var b pgx.Batch
			if err := journal.Queue(&b, e); err != nil {
				return err
			}
			return tx.SendBatch(t.Context(), &b).Close()
		}); err != nil {
			t.Fatal(err)
		}
		left, _, err := journal.ReadStreams(t.Context(), db, []string{e.Stream})
		if err != nil || len(left) != 1 {
			t.Fatalf("%d events of %s, %v", len(left), e.Stream, err)
		}
		streams = []string{e.Stream}
		p = left[0].Position
		refused(e.Stream, remove(record(3, 1, 1, p, p)))
	}
}

// TestLineRoundTrips: an event written as a line of GET /journal and of
// the archive reads back as the same event, and a line that does not
// decode or whose envelope is wrong is refused.
func TestLineRoundTrips(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 123000, time.UTC)
	id := uuid.New()
	for _, e := range []journal.Event{
		{Position: 3, RecordedAt: at, Stream: id.String(), Version: 2, Actor: "worker:alpha", DeliveryID: uuid.New(), Target: "alpha",
			OldState: lifecycle.StateQueued, NewState: lifecycle.StateDelivering,
			Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 1, LeaseEnd: at.Add(time.Minute)}},
		{Position: 9, RecordedAt: at, Stream: id.String(), Version: 5, Actor: journal.ActorRetention,
			Payload: &journal.MessagePayloadExpunged{PayloadSize: 3, PayloadSHA256: strings.Repeat("ab", 32), After: lifecycle.Duration(time.Hour)}},
	} {
		payload, err := json.Marshal(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(journal.LineOf(e, payload))
		if err != nil {
			t.Fatal(err)
		}
		var l journal.Line
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		got, err := l.Event()
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("%s: read back %+v, %v; want %+v", e.Kind(), got, err, e)
		}
		l.Stream = journal.ConfigStream
		if _, err := l.Event(); err == nil {
			t.Errorf("%s: a line on the config stream read back", e.Kind())
		}
		l.Stream, l.Payload = id.String(), json.RawMessage(`{}`)
		if _, err := l.Event(); err == nil {
			t.Errorf("%s: an empty payload read back", e.Kind())
		}
	}
}

// TestEnvelopeKeepsKindsToTheirStreams: message and delivery kinds belong
// to a message's stream, configuration kinds to config and retention's
// own to retention, and each is refused anywhere else.
func TestEnvelopeKeepsKindsToTheirStreams(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	msg := uuid.NewString()
	payloads := map[string]journal.Payload{
		msg:                     &journal.MessagePayloadExpunged{PayloadSHA256: strings.Repeat("ab", 32), After: lifecycle.Duration(time.Hour)},
		journal.ConfigStream:    &journal.SettingsChanged{Settings: lifecycle.DefaultSettings()},
		journal.RetentionStream: &journal.RetentionPass{Removed: 1},
	}
	for own, p := range payloads {
		for _, stream := range []string{msg, journal.ConfigStream, journal.RetentionStream} {
			e := journal.Event{RecordedAt: at, Stream: stream, Version: 1, Actor: journal.ActorRetention, Payload: p}
			if err := e.CheckEnvelope(); (err == nil) != (stream == own) {
				t.Errorf("%s on stream %s: %v", p.Kind(), stream, err)
			}
		}
	}
}

// TestRetentionArchivedArchiveDir: a batch's record names the archive_dir
// its files went under by an absolute path, or names none, as the records
// written before records named it.
func TestRetentionArchivedArchiveDir(t *testing.T) {
	p := journal.RetentionArchived{Archive: uuid.New(), Batch: 1, File: "batch-00000001.jsonl.gz", SHA256: strings.Repeat("ab", 32),
		Bytes: 10, Manifest: "batch-00000001.manifest.json", ManifestSHA256: strings.Repeat("cd", 32), Messages: 1, Events: 2,
		FirstPosition: 1, LastPosition: 2, Settled: 1, Total: journal.RetentionTotal{Messages: 1, Events: 2, Settled: 1}}
	for dir, valid := range map[string]bool{"": true, "/var/lib/waybill/archive": true, "archive": false} {
		p.ArchiveDir = dir
		if err := p.Validate(); (err == nil) != valid || !valid && !strings.Contains(err.Error(), "archive_dir") {
			t.Errorf("archive_dir %q: %v", dir, err)
		}
	}
}
