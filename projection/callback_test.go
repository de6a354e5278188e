package projection_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// TestCallbackFollowsEverySettlement: a message with a callback URL gets
// its callback queued each time it settles, with what it settled as; the
// calls go through claims, retries and their outcomes; a message that
// becomes busy again and settles again is called back again.
func TestCallbackFollowsEverySettlement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := "https://erp.example/outcome"
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"), CallbackURL: url})
	if err != nil {
		t.Fatal(err)
	}
	if cb := m.Callback; cb == nil || cb.URL != url || cb.Seq != 0 || cb.State != "" {
		t.Fatalf("callback before settling: %+v", cb)
	}
	settle := func(d projection.Delivery, o lifecycle.Outcome) *projection.Message {
		t.Helper()
		c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		m, err := b.w.Complete(b.ctx, d.ID, c.Token, o)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	settle(m.Deliveries[0], lifecycle.Delivered("200"))
	if claims, err := b.w.ClaimDueCallbacks(b.ctx, 5, time.Minute); err != nil || len(claims) != 0 {
		t.Fatalf("a callback of an unsettled message claimed: %v %v", claims, err)
	}
	b.now = b.now.Add(time.Second)
	m = settle(m.Deliveries[1], lifecycle.Delivered("200"))
	cb := m.Callback
	want := []projection.CallbackDelivery{{Target: "alpha", State: lifecycle.StateDelivered}, {Target: "beta", State: lifecycle.StateDelivered}}
	if cb.Seq != 1 || cb.State != lifecycle.StateQueued || cb.Status != lifecycle.StatusDelivered || !cb.SettledAt.Equal(b.now) ||
		fmt.Sprint(cb.Deliveries) != fmt.Sprint(want) {
		t.Fatalf("callback after settling: %+v", cb)
	}

	claims, err := b.w.ClaimDueCallbacks(b.ctx, 5, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].Attempt != 1 || claims[0].Callback.URL != url {
		t.Fatalf("claims %+v %v", claims, err)
	}
	if _, err := b.w.CompleteCallback(b.ctx, m.ID, uuid.New(), lifecycle.Delivered("200")); !errors.Is(err, commands.ErrClaimLost) {
		t.Fatalf("an outcome with another token: %v", err)
	}
	if _, err := b.w.CompleteCallback(b.ctx, m.ID, claims[0].Token, lifecycle.Retry(b.now.Add(time.Minute), "503")); err != nil {
		t.Fatal(err)
	}
	if claims, _ := b.w.ClaimDueCallbacks(b.ctx, 5, time.Minute); len(claims) != 0 {
		t.Fatal("a retry claimed before it is due")
	}
	b.now = b.now.Add(time.Minute)
	claims, err = b.w.ClaimDueCallbacks(b.ctx, 5, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].Attempt != 2 {
		t.Fatalf("claims %+v %v", claims, err)
	}
	// The worker dies; the lease brings the call back.
	b.now = b.now.Add(time.Minute)
	claims, err = b.w.ClaimDueCallbacks(b.ctx, 5, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].Attempt != 3 {
		t.Fatalf("claims after the lease %+v %v", claims, err)
	}
	if m, err = b.w.CompleteCallback(b.ctx, m.ID, claims[0].Token, lifecycle.Delivered("204")); err != nil {
		t.Fatal(err)
	}
	if cb := m.Callback; cb.State != lifecycle.StateDelivered || cb.Attempts != 3 || !cb.FinishedAt.Equal(b.now) {
		t.Fatalf("callback made: %+v", cb)
	}

	// Sent again, it settles again, failed this time: called back again.
	if _, err := b.w.Redeliver(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	m = settle(m.Deliveries[0], lifecycle.Failed("410 Gone"))
	if cb := m.Callback; cb.Seq != 2 || cb.State != lifecycle.StateQueued || cb.Attempts != 0 || cb.Status != lifecycle.StatusError ||
		cb.Deliveries[0].LastError != "410 Gone" {
		t.Fatalf("callback after settling again: %+v", cb)
	}

	// Nothing routed settles at once.
	m, _, err = b.w.Ingest(b.ctx, commands.NewMessage{Source: "crm", From: "a", To: "b", Payload: []byte("x"), CallbackURL: url})
	if err != nil || m.Callback.Seq != 1 || m.Callback.Status != lifecycle.StatusNotRouted || len(m.Callback.Deliveries) != 0 {
		t.Fatalf("not routed: %+v %v", m.Callback, err)
	}
	kinds := map[journal.Kind]int{}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(claims[0].Callback.MessageID))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		kinds[e.Kind()]++
	}
	if kinds[journal.KindCallbackClaimed] != 3 || kinds[journal.KindCallbackAttempted] != 2 || kinds[journal.KindCallbackLeaseExpired] != 1 {
		t.Errorf("callback events %v", kinds)
	}
	dbtest.Audit(t, b.db)
}

// TestCallbackRulesAgreeInSQLAndFold holds the callback's rules to the
// fold: for every state and every combination of due time and lease, the
// fold accepts a claim exactly when the claim rule holds, and a lease's
// expiry exactly when the expiry rule does.
func TestCallbackRulesAgreeInSQLAndFold(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	times := []time.Time{{}, now.Add(-time.Second), now, now.Add(time.Second)}
	for _, state := range lifecycle.DeliveryStates {
		for _, due := range times {
			for _, lease := range times {
				cb := projection.Callback{URL: "http://x/", Seq: 1, State: state, NextDue: due, LeaseEnd: lease,
					Attempts: 1, ClaimToken: uuid.New()}
				for _, tc := range []struct {
					rule    lifecycle.Rule
					payload journal.Payload
				}{
					{lifecycle.CallbackClaimRule, &journal.CallbackClaimed{Seq: 1, Token: uuid.New(), Attempt: 2, LeaseEnd: now.Add(time.Minute)}},
					{lifecycle.LeaseExpiryRule, &journal.CallbackLeaseExpired{Seq: 1, Token: cb.ClaimToken, LeaseEnd: lease}},
				} {
					c := cb
					m := &projection.Message{ID: uuid.New(), Version: 3, Stage: lifecycle.StageDispatched,
						Status: lifecycle.StatusDelivered, Callback: &c}
					_, err := projection.Record(m, journal.Event{RecordedAt: now, Actor: journal.ActorCallbacks, Payload: tc.payload})
					if holds := tc.rule.Holds(c.Facts(), now); (err == nil) != holds {
						t.Errorf("%s due %v lease %v: the fold says %v to %s, %s holds %v", state, due, lease, err,
							tc.payload.Kind(), tc.rule.Name, holds)
					}
				}
			}
		}
	}
}

// TestCallbackClaimsTakeTheClockOnceLocked: a callback catch-up's claims
// are recorded at the clock read once their rows are locked, not at the
// one its choice read (here the clock moves on between the two).
func TestCallbackClaimsTakeTheClockOnceLocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"),
		CallbackURL: "https://erp.example/outcome"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Deliveries {
		c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.Complete(b.ctx, d.ID, c.Token, lifecycle.Delivered("200")); err != nil {
			t.Fatal(err)
		}
	}
	later := b.now.Add(100 * time.Hour)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: testclock.AfterFirstRead(b.now, later)}, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := w.ClaimDueCallbacks(b.ctx, 5, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claims %v, %v", claims, err)
	}
	if !claims[0].LeaseEnd.Equal(later.Add(time.Minute)) {
		t.Fatalf("the call's lease ends %s, want %s", claims[0].LeaseEnd, later.Add(time.Minute))
	}
	dbtest.Audit(t, b.db)
}
