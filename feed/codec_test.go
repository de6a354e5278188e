package feed

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
)

func TestEventsRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 123456000, time.UTC)
	message, delivery := uuid.New(), uuid.New()
	accepted, err := json.Marshal(journal.MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain",
		PayloadSHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"})
	if err != nil {
		t.Fatal(err)
	}
	woken, err := json.Marshal(journal.DeliveryWoken{DispatchCount: 2, NextDue: at.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	rows := []encodedEvent{
		{position: 7, recordedAt: at, stream: message.String(), version: 1, kind: string(journal.KindMessageAccepted),
			actor: "source:erp", payload: accepted},
		{position: 1 << 40, recordedAt: at.Add(time.Microsecond), stream: message.String(), version: 2,
			deliveryID: pgtype.UUID{Bytes: delivery, Valid: true}, target: "alpha", kind: string(journal.KindDeliveryWoken),
			actor: "sweep", oldState: "queued", newState: "queued", payload: woken},
	}
	var b []byte
	ends := map[int]bool{}
	for _, r := range rows {
		b = appendEvent(b, r)
		ends[len(b)] = true
	}
	got, err := decodeEvents(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d events, want %d", len(got), len(rows))
	}
	for i, r := range rows {
		want, err := journal.Decode(journal.Kind(r.kind), r.payload)
		if err != nil {
			t.Fatal(err)
		}
		e := got[i]
		if e.Position != r.position || !e.RecordedAt.Equal(r.recordedAt) || e.Stream != r.stream ||
			e.Version != int(r.version) || e.DeliveryID != uuid.UUID(r.deliveryID.Bytes) || e.Target != r.target ||
			string(e.Kind()) != r.kind || e.Actor != r.actor || string(e.OldState) != r.oldState ||
			string(e.NewState) != r.newState || !reflect.DeepEqual(e.Payload, want) {
			t.Errorf("event %d: got %+v, want %+v", i, e, r)
		}
	}
	// Data cut inside an event is an error, never a panic.
	for n := 1; n < len(b); n++ {
		if _, err := decodeEvents(b[:n]); !ends[n] && !errors.Is(err, errTruncated) {
			t.Errorf("%d of %d bytes: %v, want a truncation", n, len(b), err)
		}
	}
}
