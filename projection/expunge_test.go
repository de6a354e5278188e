package projection_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// folded records the events on a new message, failing the test on any
// refusal, and returns the message.
func folded(t *testing.T, at time.Time, outcome lifecycle.Outcome) (*projection.Message, uuid.UUID) {
	t.Helper()
	m := &projection.Message{}
	id, d, token := uuid.New(), uuid.New(), uuid.New()
	for _, e := range []journal.Event{
		{Stream: id.String(), Actor: "source:erp", Payload: &journal.MessageAccepted{Source: "erp", From: "a", To: "b",
			ContentType: "text/plain", PayloadSize: 5, PayloadSHA256: strings.Repeat("ab", 32)}},
		{Actor: "source:erp", Payload: &journal.MessageDispatched{NewDeliveries: journal.NewDeliveries{
			Deliveries: []journal.NewDelivery{{ID: d, Seq: 1, Target: "alpha"}}, NextDue: at.Add(time.Minute)}}},
		{DeliveryID: d, Actor: "worker:alpha", Payload: &journal.DeliveryClaimed{Token: token, Attempt: 1, LeaseEnd: at.Add(time.Minute)}},
		{DeliveryID: d, Actor: "worker:alpha", Payload: &journal.DeliveryAttempted{Token: token, Attempt: 1, Outcome: outcome}},
	} {
		e.RecordedAt = at
		if _, err := projection.Record(m, e); err != nil {
			t.Fatal(err)
		}
	}
	return m, d
}

// TestFoldExpungesAPayloadOnce: message.payload_expunged is legal once, on
// a message whose status lets retention drop its payload, with the
// message's own size and digest; it leaves updated_at where it was. After
// it, every event that would send the payload is refused for that reason,
// a resend and a replay among them.
func TestFoldExpungesAPayloadOnce(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	later := at.Add(time.Hour)
	expunged := func(m *projection.Message) journal.Payload {
		return &journal.MessagePayloadExpunged{PayloadSize: m.PayloadSize, PayloadSHA256: m.PayloadSHA256, After: lifecycle.Duration(time.Hour)}
	}

	for _, tt := range []struct {
		outcome lifecycle.Outcome
		legal   bool
	}{
		{lifecycle.Delivered("200"), true},
		{lifecycle.Failed("400"), false},
		{lifecycle.Retry(at.Add(time.Minute), "503"), false},
		{lifecycle.AwaitingAck("sent", at.Add(time.Hour)), false},
	} {
		m, _ := folded(t, at, tt.outcome)
		_, err := projection.Record(m.Clone(), journal.Event{RecordedAt: later, Actor: journal.ActorRetention, Payload: expunged(m)})
		if (err == nil) != tt.legal || lifecycle.KeepsPayload(m.Status) == tt.legal {
			t.Errorf("expunge of a %s message: %v", m.Status, err)
		}
	}

	m, d := folded(t, at, lifecycle.Delivered("200"))
	wrong := expunged(m).(*journal.MessagePayloadExpunged)
	wrong.PayloadSize++
	if _, err := projection.Record(m.Clone(), journal.Event{RecordedAt: later, Actor: journal.ActorRetention, Payload: wrong}); err == nil {
		t.Error("an expunge of another size was folded")
	}
	before := *m
	if _, err := projection.Record(m, journal.Event{RecordedAt: later, Actor: journal.ActorRetention, Payload: expunged(m)}); err != nil {
		t.Fatal(err)
	}
	if !m.PayloadExpunged || m.Version != before.Version+1 || !m.UpdatedAt.Equal(before.UpdatedAt) || m.Status != before.Status {
		t.Errorf("after the expunge: %+v", m)
	}
	if _, err := projection.Record(m.Clone(), journal.Event{RecordedAt: later, Actor: journal.ActorRetention, Payload: expunged(m)}); err == nil {
		t.Error("a second expunge was folded")
	}
	for _, e := range []journal.Event{
		{DeliveryID: d, Actor: "operator:ops", Payload: &journal.DeliveryRedelivered{DispatchCount: 1, NextDue: later.Add(time.Minute)}},
		{Actor: "operator:ops", Payload: &journal.MessageRedispatched{}},
		{DeliveryID: d, Actor: "worker:alpha", Payload: &journal.DeliveryClaimed{Token: uuid.New(), Attempt: 2, LeaseEnd: later.Add(time.Minute)}},
		// A resend and a replay: a new generation has nothing to send.
		{Actor: "operator:ops", Payload: &journal.MessageResent{Generation: 2, Superseded: []uuid.UUID{}, NewDeliveries: journal.NewDeliveries{
			Deliveries: []journal.NewDelivery{{ID: uuid.New(), Seq: 2, Target: "alpha"}}, NextDue: later.Add(time.Minute)}}},
		{Actor: "operator:ops", Payload: &journal.MessageResent{Generation: 2, Replay: true, Superseded: []uuid.UUID{},
			NewDeliveries: journal.NewDeliveries{Deliveries: []journal.NewDelivery{}}}},
	} {
		e.RecordedAt = later
		_, err := projection.Record(m.Clone(), e)
		if !errors.Is(err, projection.ErrPayloadExpunged) || !strings.Contains(err.Error(), "expunged") {
			t.Errorf("%s after the expunge: %v", e.Kind(), err)
		}
	}
	// A receipt refused still moves the message, and its clock.
	e, err := projection.Record(m, journal.Event{RecordedAt: later, DeliveryID: d, Actor: "operator:ops",
		Payload: &journal.ReceiptRefused{Reason: "not awaited"}})
	if err != nil || !m.UpdatedAt.Equal(later) || e.Version != m.Version {
		t.Errorf("refused receipt: %v, updated %v", err, m.UpdatedAt)
	}
}
