package projection_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestApplyOperation runs event sequences of an operation's stream through
// the fold: the last event of each must be refused for the reason given,
// or, with none, the state must be the one given.
func TestApplyOperation(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	ids := make([]uuid.UUID, projection.OperationChunk+2)
	for i := range ids {
		ids[i] = uuid.New()
	}
	created := func(matched int) journal.Payload {
		return &journal.OperationCreated{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}, Matched: matched}
	}
	matched := func(ids ...uuid.UUID) journal.Payload { return &journal.OperationMatched{Messages: ids} }
	progressed := func(from int, done ...uuid.UUID) journal.Payload {
		return &journal.OperationProgressed{From: from, Done: done, Refused: []journal.OperationRefusal{}}
	}
	refused := func(from int, id uuid.UUID) journal.Payload {
		return &journal.OperationProgressed{From: from, Done: []uuid.UUID{},
			Refused: []journal.OperationRefusal{{MessageID: id, Reason: "no"}}}
	}
	finished := func(s lifecycle.OperationState, why string) journal.Payload {
		return &journal.OperationFinished{State: s, Error: why}
	}
	for _, tt := range []struct {
		name   string
		events []journal.Payload
		reason string
		state  lifecycle.OperationState
		done   int
	}{
		{"created, listed, taken, done", []journal.Payload{created(2), matched(ids[0], ids[1]), progressed(0, ids[0]),
			refused(1, ids[1]), finished(lifecycle.OperationDone, "")}, "", lifecycle.OperationDone, 1},
		{"nothing matched ends at once", []journal.Payload{created(0), finished(lifecycle.OperationDone, "")}, "", lifecycle.OperationDone, 0},
		{"created twice", []journal.Payload{created(1), created(1)}, "created already", "", 0},
		{"taken before listed in full", []journal.Payload{created(2), matched(ids[0]), progressed(0, ids[0])}, "only 1 of the 2", "", 0},
		{"listed beyond what matched", []journal.Payload{created(1), matched(ids[0], ids[1])}, "of the 1 matched", "", 0},
		{"listed after a short event", []journal.Payload{created(3), matched(ids[0]), matched(ids[1])}, "it was the last", "", 0},
		{"listed in events too large", []journal.Payload{created(len(ids)), matched(ids...)}, "at most 1000", "", 0},
		{"listed after a full event", []journal.Payload{created(len(ids)), matched(ids[:projection.OperationChunk]...),
			matched(ids[projection.OperationChunk:]...)}, "", lifecycle.OperationRunning, 0},
		{"a batch from the wrong place", []journal.Payload{created(2), matched(ids[0], ids[1]), progressed(1, ids[1])}, "the next is 0", "", 0},
		{"a batch past the end", []journal.Payload{created(1), matched(ids[0]), progressed(0, ids[0], ids[1])}, "1 are left", "", 0},
		{"done before the end", []journal.Payload{created(2), matched(ids[0], ids[1]), progressed(0, ids[0]),
			finished(lifecycle.OperationDone, "")}, "taken 1 of the 2", "", 0},
		{"failed at any point", []journal.Payload{created(2), matched(ids[0], ids[1]), finished(lifecycle.OperationFailed, "broken")},
			"", lifecycle.OperationFailed, 0},
		{"cancelled, then a batch", []journal.Payload{created(1), matched(ids[0]), &journal.OperationCancelled{},
			progressed(0, ids[0])}, "has ended", "", 0},
		{"cancelled twice", []journal.Payload{created(1), &journal.OperationCancelled{}, &journal.OperationCancelled{}}, "has ended", "", 0},
		{"a message event", []journal.Payload{created(1), &journal.DeliverySkipped{}}, "not an operation event", "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &projection.Operation{}
			id := uuid.New()
			var err error
			for i, p := range tt.events {
				_, err = projection.RecordOperation(o, journal.Event{RecordedAt: at.Add(time.Duration(i) * time.Second),
					Stream: journal.OperationStream(id), Actor: "operator:alice", Payload: p})
				if err != nil && i < len(tt.events)-1 {
					t.Fatalf("event %d: %v", i, err)
				}
			}
			switch {
			case tt.reason != "" && (err == nil || !strings.Contains(err.Error(), tt.reason)):
				t.Fatalf("the last event: %v, want a refusal about %q", err, tt.reason)
			case tt.reason == "" && err != nil:
				t.Fatal(err)
			case tt.reason == "" && (o.State != tt.state || o.Done != tt.done || o.ID != id || o.CreatedBy != "operator:alice"):
				t.Fatalf("state %+v, want %s with %d done", o, tt.state, tt.done)
			}
		})
	}
}

// TestOperationEventsBelongToOperationStreams: the envelope check keeps
// operation kinds in operation streams and every other kind out of them.
func TestOperationEventsBelongToOperationStreams(t *testing.T) {
	t.Parallel()
	op, msg := journal.OperationStream(uuid.New()), journal.MessageStream(uuid.New())
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		stream string
		p      journal.Payload
		ok     bool
	}{
		{op, &journal.OperationCancelled{}, true},
		{msg, &journal.OperationCancelled{}, false},
		{journal.ConfigStream, &journal.OperationCancelled{}, false},
		{op, &journal.MessageRefused{Refusal: lifecycle.RefusalRejected, Reason: "x"}, false},
		{"operation:not-a-uuid", &journal.OperationCancelled{}, false},
	} {
		e := journal.Event{RecordedAt: at, Stream: tt.stream, Version: 1, Actor: "system", Payload: tt.p}
		if err := e.CheckEnvelope(); (err == nil) != tt.ok {
			t.Errorf("%s in %s: %v", tt.p.Kind(), tt.stream, err)
		}
	}
	if id, ok := journal.OperationOf(op); !ok || journal.OperationStream(id) != op {
		t.Errorf("OperationOf(%s) = %s, %v", op, id, ok)
	}
}
