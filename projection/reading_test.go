package projection_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// interleaved ingests n messages, each with a delivery to alpha and to beta,
// then claims and completes every delivery in rounds, so each message's
// events lie far apart in the journal.
func (b *bundle) interleaved(t *testing.T, n int) []*projection.Message {
	t.Helper()
	var ms []*projection.Message
	for range n {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	for round, outcome := range []lifecycle.Outcome{lifecycle.Retry(b.now.Add(time.Minute), "503"), lifecycle.Delivered("200")} {
		b.now = b.now.Add(time.Duration(round) * 2 * time.Minute)
		tokens := map[uuid.UUID]uuid.UUID{}
		for _, m := range ms {
			for _, d := range m.Deliveries {
				c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				tokens[d.ID] = c.Token
			}
		}
		for _, m := range ms {
			for _, d := range m.Deliveries {
				if _, err := b.w.Complete(b.ctx, d.ID, tokens[d.ID], outcome); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return ms
}

// TestAuditReadsStreamsAcrossRanges reads a journal whose streams each span
// many runs, on up to four connections, down to one position per query:
// the report, refused event and position included, is the one a single
// read gives, and so is the rebuild.
func TestAuditReadsStreamsAcrossRanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ms := b.interleaved(t, 6)
	// An outcome nobody claimed, in the middle of the journal, on a stream
	// that sees no command after it.
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	var bad int64
	if err := b.db.QueryRow(b.ctx, `INSERT INTO journal (recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
		VALUES ($1, $2, $3, $4, $5, 'delivery.attempted', 'worker:alpha', 'queued', 'delivered',
		'{"token":"0194a2b1-0000-7000-8000-000000000001","attempt":1,"outcome":{"kind":"delivered"}}')
		RETURNING position`, b.now, m.ID.String(), m.Version+1, m.Deliveries[0].ID, m.Deliveries[0].Target).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	b.interleaved(t, 3)
	before := b.snapshot(t)

	one, err := projection.AuditReading(b.ctx, b.db, 1, 1<<40, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Violations) != 1 || one.Violations[0].Position != bad || one.Messages != len(ms)+4 {
		t.Fatalf("one read: %d messages, %v", one.Messages, one.Violations)
	}
	for conns := 2; conns <= 4; conns++ {
		for _, chunk := range []int64{1, 2, 3, 7} {
			r, err := projection.AuditReading(b.ctx, b.db, conns, chunk, nil)
			if err != nil {
				t.Fatalf("%d connections, chunk %d: %v", conns, chunk, err)
			}
			if !reflect.DeepEqual(r, one) {
				t.Fatalf("%d connections, chunk %d: %+v\nwant %+v", conns, chunk, r, one)
			}
		}
	}
	r, err := projection.RebuildReading(b.ctx, b.db, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, one) {
		t.Fatalf("rebuild: %+v\nwant %+v", r, one)
	}
	if after := b.snapshot(t); !reflect.DeepEqual(after, before) {
		t.Fatalf("the rebuild changed the tables:\n%s\nwas\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
}

// TestAuditSeesOneSnapshot commits, once the audit has its snapshot, a
// transaction that was open before it (its event lies among the events
// the audit reads, on a connection that imported the snapshot) and new
// commands: the audit sees none of it.
func TestAuditSeesOneSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ms := b.interleaved(t, 2)
	open, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(b.ctx)
	var late int64
	if err := open.QueryRow(b.ctx, `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
		VALUES ($1, $2, 1, 'message.accepted', 'source:erp', $3) RETURNING position`, b.now, uuid.NewString(),
		`{"source":"erp","from":"a","to":"b","content_type":"text/plain","payload_size":1,"payload_sha256":"`+strings.Repeat("ab", 32)+`"}`,
	).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("z")}); err != nil {
		t.Fatal(err)
	}
	var events int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM journal`).Scan(&events); err != nil {
		t.Fatal(err)
	}

	// The second connection reads from the late event on.
	r, err := projection.AuditReading(b.ctx, b.db, 2, late-1, func() {
		if err := open.Commit(b.ctx); err != nil {
			t.Error(err)
		}
		if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("w")}); err != nil {
			t.Error(err)
		}
		if _, err := b.w.Redeliver(b.ctx, ms[0].ID, ms[0].Deliveries[0].ID, commands.Action{Operator: "admin"}); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) > 0 || r.Events != events || r.Messages != 3 {
		t.Fatalf("audit: %d events (want %d), %d messages, %v", r.Events, events, r.Messages, r.Violations)
	}
	// The late event is there for the next audit, with no row and out of
	// the kept counts.
	r = b.audit(t)
	hour := b.now.Truncate(time.Hour).Format(time.RFC3339)
	want := []string{"not in the messages table", "the count of received messages is 0, the journal makes 1",
		"the count of messages created in the hour from " + hour + " is 4, the journal makes 5",
		"the count of received messages created in the hour from " + hour + " is 0, the journal makes 1"}
	if len(r.Violations) != len(want) || r.Messages != 4 {
		t.Fatalf("next audit: %d messages, %v", r.Messages, r.Violations)
	}
	for i, v := range r.Violations {
		if !strings.Contains(v.Problem, want[i]) {
			t.Fatalf("next audit: %v, want %q", r.Violations, want)
		}
	}
}

// TestAuditSharesMeetAtTheirBounds puts messages at the ids where the
// shares of the tables meet, for one to four connections: each is checked
// once, by one share, whether its row is there or not.
func TestAuditSharesMeetAtTheirBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []uuid.UUID
	for _, first := range []byte{0x00, 0x3f, 0x40, 0x54, 0x55, 0x7f, 0x80, 0xa9, 0xaa, 0xbf, 0xc0, 0xff} {
		low, high := uuid.UUID{first}, uuid.UUID{first}
		for i := 1; i < 16; i++ {
			high[i] = 0xff
		}
		ids = append(ids, low, high)
	}
	for _, id := range ids {
		if _, err := b.db.Exec(b.ctx, `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
			VALUES ($1, $2, 1, 'message.accepted', 'source:erp', $3)`, b.now, id.String(),
			`{"source":"erp","from":"a","to":"b","content_type":"text/plain","payload_size":1,"payload_sha256":"`+strings.Repeat("ab", 32)+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 || r.Messages != len(ids) {
		t.Fatalf("rebuild: %v, %+v", err, r)
	}
	for conns := 1; conns <= 4; conns++ {
		r, err := projection.AuditReading(b.ctx, b.db, conns, 5, nil)
		if err != nil || len(r.Violations) > 0 || r.Messages != len(ids) {
			t.Fatalf("%d connections: %v, %+v", conns, err, r)
		}
	}
	// Every other row goes, and a delivery of no message appears at each
	// bound.
	var gone []uuid.UUID
	for i, id := range ids {
		if i%2 == 0 {
			gone = append(gone, id)
			if _, err := b.db.Exec(b.ctx, `DELETE FROM messages WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.db.Exec(b.ctx, `INSERT INTO deliveries (id, message_id, message_created_at, seq, version, target, state,
			attempts, dispatch_count, redeliveries, redelivered_attempts, last_error, created_at, updated_at)
			VALUES (gen_random_uuid(), $1, now(), 1, 1, 'alpha', 'queued', 0, 1, 0, 0, '', now(), now())`,
			uuid.UUID{id[0], 0, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for conns := 1; conns <= 4; conns++ {
		r, err := projection.AuditReading(b.ctx, b.db, conns, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		missing, orphans := 0, 0
		for _, v := range r.Violations {
			switch v.Problem {
			case "in the journal but not in the messages table":
				missing++
			case "stored delivery of no stored message":
				orphans++
			default:
				t.Errorf("%d connections: %s", conns, v)
			}
		}
		if missing != len(gone) || orphans != len(ids) || r.Messages != len(ids)-len(gone) || r.Deliveries != len(ids) {
			t.Fatalf("%d connections: %d missing, %d orphans, %d messages, %d deliveries", conns, missing, orphans, r.Messages, r.Deliveries)
		}
	}
}

// TestLaneCursor: a lane's cursor gives back the key it was made of, any
// key, and anything else is refused on the field cursor.
func TestLaneCursor(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"p-1", "patient 42/ünï", strings.Repeat("k", lifecycle.MaxOrderingKeyLength)} {
		got, err := projection.ParseLaneCursor(projection.LaneCursor(key))
		if err != nil || got != key {
			t.Errorf("%q: %q, %v", key, got, err)
		}
	}
	for _, bad := range []string{"!", "a=", "%zz"} {
		var fe *lifecycle.FieldError
		if _, err := projection.ParseLaneCursor(bad); !errors.As(err, &fe) || fe.Field != "cursor" {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
