package projection_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestAuditNamesALaneOvertaken writes journals in which a follower of a lane
// went before its head, behind the commands' backs, and checks the audit
// names the event and the delivery: one unblocked while its head was still
// being worked, one placed at the head of a held lane and claimed. Once the
// journal records a removal by retention, the audit still names both, as
// live deliveries contradict them, while a gap in the places, which removed
// deliveries explain, is named only before.
func TestAuditNamesALaneOvertaken(t *testing.T) {
	t.Parallel()
	// third forges a third message of the lane, placed at place.
	third := func(b *bundle, place journal.Lane) []journal.Event {
		id := uuid.Must(uuid.NewV7())
		stream := journal.MessageStream(id)
		return []journal.Event{
			{RecordedAt: b.now, Stream: stream, Version: 1, Actor: "source:erp", Payload: &journal.MessageAccepted{Source: "erp",
				From: "a", To: "b", ContentType: "text/plain", PayloadSHA256: strings.Repeat("0", 64), OrderingKey: "k"}},
			{RecordedAt: b.now, Stream: stream, Version: 2, Actor: "source:erp", Payload: &journal.MessageDispatched{
				NewDeliveries: journal.NewDeliveries{Deliveries: []journal.NewDelivery{{ID: uuid.Must(uuid.NewV7()), Seq: 1, Target: "hl7",
					Lane: place}}, NextDue: b.now.Add(time.Minute)}}},
		}
	}
	for _, tc := range []struct {
		name  string
		forge func(b *bundle, head, next *projection.Message) []journal.Event
		want  string
		// explained says a removal by retention explains the forgery.
		explained bool
	}{
		{"unblocked early", func(b *bundle, head, next *projection.Message) []journal.Event {
			return []journal.Event{{RecordedAt: b.now, Stream: journal.MessageStream(next.ID), Version: next.Version + 1,
				DeliveryID: next.Deliveries[0].ID, Target: "hl7", Actor: journal.ActorSystem,
				OldState: lifecycle.StateBlocked, NewState: lifecycle.StateQueued,
				Payload: &journal.DeliveryUnblocked{DispatchCount: 1, NextDue: b.now.Add(time.Minute), After: head.Deliveries[0].ID}}}
		}, "has not settled for the lane", false},
		{"claimed out of turn", func(b *bundle, head, next *projection.Message) []journal.Event {
			// A third message placed as if the lane were free, then claimed.
			events := third(b, journal.Lane{LaneSeq: 3})
			placed := events[1]
			d := placed.Payload.(*journal.MessageDispatched).Deliveries[0].ID
			return append(events, journal.Event{RecordedAt: b.now, Stream: placed.Stream, Version: 3, DeliveryID: d, Target: "hl7",
				Actor: "worker:hl7", OldState: lifecycle.StateQueued, NewState: lifecycle.StateDelivering,
				Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 1, LeaseEnd: b.now.Add(time.Minute)}})
		}, "is put in the lane as its head", false},
		{"placed after a gap", func(b *bundle, head, next *projection.Message) []journal.Event {
			return third(b, journal.Lane{LaneSeq: 4, Blocked: true})
		}, "the next place is 3", true},
	} {
		for _, removal := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, removal %v", tc.name, removal), func(t *testing.T) {
				t.Parallel()
				auditForgery(t, tc.forge, removal, tc.want, !removal || !tc.explained)
			})
		}
	}
}

// fifoTarget makes the fifo target hl7, to which the source lab routes
// every message.
func (b *bundle) fifoTarget(t *testing.T) {
	t.Helper()
	spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}
	if _, err := b.w.CreateTarget(b.ctx, spec, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "lab", From: "*", To: "*", Target: "hl7"}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
}

// auditForgery writes the journal of two messages of one lane, then the
// forged events, after a record of a removal by retention when removal
// says so, and checks whether the audit names an event saying want.
func auditForgery(t *testing.T, forge func(b *bundle, head, next *projection.Message) []journal.Event, removal bool,
	want string, named bool) {
	b := setup(t)
	b.fifoTarget(t)
	var ms []*projection.Message
	for range 2 {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "lab", From: "a", To: "b", Payload: []byte("x"), OrderingKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	if r, err := projection.Audit(b.ctx, b.db, uuid.Nil); err != nil || len(r.Violations) > 0 {
		t.Fatalf("before the forgery: %v %v", r.Violations, err)
	}
	var events []journal.Event
	if removal {
		// The record only: the audit without --archive reads no file.
		one := &journal.RetentionArchived{Archive: uuid.New(), Batch: 1, File: "batch-00000001.jsonl.gz",
			SHA256: strings.Repeat("0", 64), Bytes: 1, Manifest: "batch-00000001.manifest.json",
			ManifestSHA256: strings.Repeat("0", 64), Messages: 1, Events: 1, FirstPosition: 1, LastPosition: 1, Settled: 1}
		one.Total = journal.RetentionTotal{}.Add(one)
		events = append(events, journal.Event{RecordedAt: b.now, Stream: journal.RetentionStream, Version: 1,
			Actor: journal.ActorRetention, Payload: one})
	}
	events = append(events, forge(b, ms[0], ms[1])...)
	var batch pgx.Batch
	if err := journal.Queue(&batch, events...); err != nil {
		t.Fatal(err)
	}
	if err := b.db.SendBatch(b.ctx, &batch).Close(); err != nil {
		t.Fatal(err)
	}
	r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	found := slices.ContainsFunc(r.Violations, func(v projection.Violation) bool {
		return v.Position > 0 && strings.Contains(v.Problem, want)
	})
	if found != named {
		t.Errorf("a violation says %q: %v, want %v: %v", want, found, named, r.Violations)
	}
}
