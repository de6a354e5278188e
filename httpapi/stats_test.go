package httpapi_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var empty httpapi.Stats
	b.as(t, readerToken, http.MethodGet, "/stats", nil).want(t, http.StatusOK, &empty)
	if len(empty.DeliveriesByState) != len(lifecycle.CountedStates) || empty.InFlightMessages != 0 || empty.OldestDueSeconds != 0 ||
		empty.Targets == nil || len(empty.Targets) != 0 {
		t.Errorf("stats of nothing %+v", empty)
	}

	// Its attempts fail over eight days: its health neither holds nor
	// disables it, so that each failure is a figure of its own.
	b.target(t, "billing", map[string]any{"health": map[string]any{"breaker": nil, "disable_after": nil}})
	b.admin(t, http.MethodPut, "/settings", lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 1}}).
		want(t, http.StatusOK, nil)
	failed := func() {
		t.Helper()
		m, _, err := b.w.Ingest(b.ctx, newMessage())
		if err != nil {
			t.Fatal(err)
		}
		b.fail(t, m.Deliveries[0].ID)
	}
	failed() // eight days before: in no window
	b.clock.Advance(2 * 24 * time.Hour)
	failed() // six days before: in the week only
	b.clock.Advance(6 * 24 * time.Hour)
	now := b.clock.Now()

	if _, _, err := b.w.Ingest(b.ctx, newMessage()); err != nil { // in progress, due at now + 10 s
		t.Fatal(err)
	}
	failed() // error
	retrying, _, err := b.w.Ingest(b.ctx, newMessage())
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.w.Claim(b.ctx, retrying.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, c.Message.Deliveries[0].ID, c.Token, lifecycle.Retry(now.Add(time.Hour), "503")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.w.Accept(b.ctx, newMessage()); err != nil { // received
		t.Fatal(err)
	}
	held, _, err := b.w.Accept(b.ctx, newMessage())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Refuse(b.ctx, held.ID, lifecycle.RefusalRejected, "a repeat", "source:erp"); err != nil { // refused
		t.Fatal(err)
	}
	lost := newMessage()
	lost.Source = "crm"
	if _, _, err := b.w.Ingest(b.ctx, lost); err != nil { // not routed
		t.Fatal(err)
	}
	stalled, _, err := b.w.Ingest(b.ctx, newMessage())
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(20 * time.Second)
	if kind, err := b.w.Wake(b.ctx, stalled.Deliveries[0].ID); err != nil || kind != "delivery.stalled" {
		t.Fatalf("wake: %s, %v", kind, err)
	}

	var got httpapi.Stats
	b.as(t, readerToken, http.MethodGet, "/stats", nil).want(t, http.StatusOK, &got)
	want := httpapi.Stats{
		InFlightMessages: 3, // in progress, retrying, received
		FailedLast24h:    2, // error, stalled
		RefusedLast24h:   1,
		MessagesLast7d:   8,
		DeliveriesByState: map[lifecycle.DeliveryState]int64{"queued": 1, "blocked": 0, "delivering": 0, "retrying": 1,
			"awaiting_ack": 0, "delivered": 0, "failed": 3, "stalled": 1, "skipped": 0, "scheduled": 0},
		DueDeliveries:    1, // the queued one, due 10 s after its dispatch
		OldestDueSeconds: 10,
		// In flight the queued and the retrying one; failed the one in
		// error and the stalled one; the queued one is due.
		Targets: []httpapi.TargetStats{{Target: "billing", InFlight: 2, FailedLast24h: 2, OldestDueSeconds: 10}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}
	b.as(t, readerToken, http.MethodGet, "/stats?window=1h", nil).invalidField(t, "window")
}
