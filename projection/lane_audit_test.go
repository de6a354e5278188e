package projection_test

import (
	"encoding/json"
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
// being worked, one placed at the head of a held lane and claimed.
func TestAuditNamesALaneOvertaken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		forge func(b *bundle, head, next *projection.Message) []journal.Event
		want  string
	}{
		{"unblocked early", func(b *bundle, head, next *projection.Message) []journal.Event {
			return []journal.Event{{RecordedAt: b.now, Stream: journal.MessageStream(next.ID), Version: next.Version + 1,
				DeliveryID: next.Deliveries[0].ID, Target: "hl7", Actor: journal.ActorSystem,
				OldState: lifecycle.StateBlocked, NewState: lifecycle.StateQueued,
				Payload: &journal.DeliveryUnblocked{DispatchCount: 1, NextDue: b.now.Add(time.Minute), After: head.Deliveries[0].ID}}}
		}, "has not settled for the lane"},
		{"claimed out of turn", func(b *bundle, head, next *projection.Message) []journal.Event {
			// A third message placed as if the lane were free, then claimed.
			id := uuid.Must(uuid.NewV7())
			d := uuid.Must(uuid.NewV7())
			stream := journal.MessageStream(id)
			return []journal.Event{
				{RecordedAt: b.now, Stream: stream, Version: 1, Actor: "source:erp", Payload: &journal.MessageAccepted{Source: "erp",
					From: "a", To: "b", ContentType: "text/plain", PayloadSHA256: strings.Repeat("0", 64), OrderingKey: "k"}},
				{RecordedAt: b.now, Stream: stream, Version: 2, Actor: "source:erp", Payload: &journal.MessageDispatched{
					NewDeliveries: journal.NewDeliveries{Deliveries: []journal.NewDelivery{{ID: d, Seq: 1, Target: "hl7",
						Lane: journal.Lane{LaneSeq: 3}}}, NextDue: b.now.Add(time.Minute)}}},
				{RecordedAt: b.now, Stream: stream, Version: 3, DeliveryID: d, Target: "hl7", Actor: "worker:hl7",
					OldState: lifecycle.StateQueued, NewState: lifecycle.StateDelivering,
					Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 1, LeaseEnd: b.now.Add(time.Minute)}},
			}
		}, "is put in the lane as its head"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
				Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}
			if _, err := b.w.CreateTarget(b.ctx, spec, "operator:admin"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "lab", From: "*", To: "*", Target: "hl7"}, "operator:admin"); err != nil {
				t.Fatal(err)
			}
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
			var batch pgx.Batch
			if err := journal.Queue(&batch, tc.forge(b, ms[0], ms[1])...); err != nil {
				t.Fatal(err)
			}
			if err := b.db.SendBatch(b.ctx, &batch).Close(); err != nil {
				t.Fatal(err)
			}
			r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, v := range r.Violations {
				if v.Position > 0 && strings.Contains(v.Problem, tc.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("no violation says %q: %v", tc.want, r.Violations)
			}
		})
	}
}
