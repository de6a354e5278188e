package commands_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestExpungePayload: a delivered message loses its payload once the
// payload_after in force has passed since it settled, with the event and
// the payloads row in one transaction; not before, not twice, not a failed
// one, and not by a payload_after no longer in force. Afterwards redeliver
// and redispatch are refused for that reason, and a claim too; resend and
// replay are refused as not resendable.
func TestExpungePayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	hour := lifecycle.Duration(time.Hour)
	retain := func(payloadAfter *lifecycle.Duration) {
		t.Helper()
		s, err := b.w.Settings(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Retention.PayloadAfter = payloadAfter
		if err := b.w.SetSettings(b.ctx, s, admin); err != nil {
			t.Fatal(err)
		}
	}
	settle := func(o lifecycle.Outcome) (id, delivery uuid.UUID) {
		t.Helper()
		m := b.ingest(t)
		d := m.Deliveries[0]
		c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.Complete(b.ctx, d.ID, c.Token, o); err != nil {
			t.Fatal(err)
		}
		return m.ID, d.ID
	}
	id, d := settle(lifecycle.Delivered("200"))
	failed, _ := settle(lifecycle.Failed("400"))
	kept, _ := settle(lifecycle.Delivered("200"))
	settledAt := b.clock.Now()

	b.clock.Advance(time.Hour - time.Microsecond)
	if done, err := b.w.ExpungePayload(b.ctx, id); done || err != nil {
		t.Fatalf("without payload_after: %v, %v", done, err)
	}
	retain(&hour)
	if done, err := b.w.ExpungePayload(b.ctx, id); done || err != nil {
		t.Fatalf("before payload_after: %v, %v", done, err)
	}
	b.clock.Advance(time.Microsecond)
	for _, want := range []bool{true, false} {
		if done, err := b.w.ExpungePayload(b.ctx, id); done != want || err != nil {
			t.Fatalf("at payload_after: %v, %v; want %v", done, err, want)
		}
	}
	if done, err := b.w.ExpungePayload(b.ctx, failed); done || err != nil {
		t.Errorf("a failed message: %v, %v", done, err)
	}
	// Retention chose kept by a payload_after that changed since: the
	// command decides by the one in force.
	retain(new(lifecycle.Duration(720 * time.Hour)))
	if done, err := b.w.ExpungePayload(b.ctx, kept); done || err != nil {
		t.Errorf("after payload_after grew: %v, %v", done, err)
	}
	retain(nil)
	if done, err := b.w.ExpungePayload(b.ctx, kept); done || err != nil {
		t.Errorf("after payload_after was unset: %v, %v", done, err)
	}
	var payloads int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM payloads WHERE message_id = $1`, id).Scan(&payloads); err != nil || payloads != 0 {
		t.Fatalf("%d payload rows left, %v", payloads, err)
	}
	m, err := b.w.Redispatch(b.ctx, id, commands.Action{Operator: "ops"})
	var state *commands.StateError
	if !errors.Is(err, commands.ErrPayloadExpunged) || !errors.As(err, &state) || state.State != string(lifecycle.StatusDelivered) {
		t.Errorf("redispatch: %v, %v", m, err)
	}
	if _, err := b.w.Redeliver(b.ctx, id, d, commands.Action{Operator: "ops"}); !errors.Is(err, commands.ErrPayloadExpunged) {
		t.Errorf("redeliver: %v", err)
	}
	if _, err := b.w.Claim(b.ctx, d, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
		t.Errorf("claim: %v", err)
	}
	// A resend and a replay are refused as not resendable, for the reason
	// Resendable gives (the console offers neither), and change nothing.
	for name, send := range map[string]func() error{
		"resend": func() error { _, err := b.w.Resend(b.ctx, id, nil, commands.Action{Operator: "ops"}); return err },
		"replay": func() error { _, err := b.w.Replay(b.ctx, id, commands.Action{Operator: "ops"}); return err },
	} {
		if err := send(); !errors.Is(err, commands.ErrNotResendable) || !errors.As(err, &state) || !strings.Contains(state.Reason, "expunged") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if loaded, err := projection.Load(b.ctx, b.db, id); err != nil || commands.Resendable(loaded) == nil || loaded.Generation != 1 {
		t.Errorf("after the refused resend: %v", err)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(id))
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if p, ok := last.Payload.(*journal.MessagePayloadExpunged); !ok || last.Actor != journal.ActorRetention || p.After != hour {
		t.Fatalf("last event %s by %s", last.Kind(), last.Actor)
	}
	loaded, err := b.w.Redispatch(b.ctx, failed, commands.Action{Operator: "ops"})
	if err != nil || !loaded.UpdatedAt.After(settledAt) {
		t.Errorf("a failed message keeps its payload and may be redispatched: %v", err)
	}
	b.audit(t)
}
