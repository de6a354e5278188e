package commands_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// reshape is a transform that sends a receiver its own format, and no
// test traffic.
const reshape = `"x-test" in message.headers ? {"cancel": "test traffic"} :
	{"payload": {"ref": message.payload.id}, "path": "/in/" + message.type, "method": "PUT", "headers": {"x-kind": message.type}}`

// TestTransformShapesDeliveries: a target's transform runs once, as the
// delivery is made: what it makes is journaled, kept beside the delivery
// and read by every claim of it; a cancel makes the delivery skipped and
// a failure failed, neither of them woken; a changed transform shapes the
// deliveries made after the change, a resend's among them.
func TestTransformShapesDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := lifecycle.Target{Name: "billing", Kind: "http", Enabled: true, Config: sinkConfig, Transform: "{"}
	if _, err := b.w.CreateTarget(b.ctx, target, admin); !errors.Is(err, commands.ErrInvalid) || !strings.Contains(err.Error(), "transform: at 1:2") {
		t.Fatalf("a transform that does not compile: %v", err)
	}
	target.Transform = reshape
	if _, err := b.w.CreateTarget(b.ctx, target, admin); err != nil {
		t.Fatal(err)
	}
	b.targets(t, "plain")
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, admin); err != nil {
		t.Fatal(err)
	}
	ingest := func(payload string, headers map[string]string) *projection.Message {
		t.Helper()
		in := newMessage()
		in.Type, in.ContentType, in.Payload, in.Headers = "invoice.paid", "application/json", []byte(payload), headers
		m, _, err := b.w.Ingest(b.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	of := func(m *projection.Message, target string) projection.Delivery {
		for _, d := range m.Deliveries {
			if d.Target == target && m.Current(&d) {
				return d
			}
		}
		t.Fatalf("no delivery to %s", target)
		return projection.Delivery{}
	}
	b.wake.take()

	shaped := ingest(`{"id": "in-1", "amount": 5}`, nil)
	d := of(shaped, "billing")
	if !d.Shaped || of(shaped, "plain").Shaped {
		t.Fatalf("shaped: billing %t, plain %t; only billing's claims read a shape", d.Shaped, of(shaped, "plain").Shaped)
	}
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := claim.Shape
	if s == nil || string(s.Body) != `{"ref":"in-1"}` || s.ContentType != "application/json" || s.Path != "/in/invoice.paid" ||
		s.Method != "PUT" || s.Headers["x-kind"] != "invoice.paid" || string(claim.Payload) != `{"id": "in-1", "amount": 5}` {
		t.Fatalf("claim: shape %+v, payload %q", s, claim.Payload)
	}
	// A retry's claim reads the same shape.
	if _, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: "503", RetryAt: b.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	again, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if again.Shape == nil || string(again.Shape.Body) != string(s.Body) || again.Shape.PayloadSHA256 != s.PayloadSHA256 {
		t.Fatalf("retry: shape %+v, want %+v", again.Shape, s)
	}
	if other, err := b.w.Claim(b.ctx, of(shaped, "plain").ID, time.Minute); err != nil || other.Shape != nil {
		t.Fatalf("a target without a transform: shape %+v, %v", other.Shape, err)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(shaped.ID))
	if err != nil {
		t.Fatal(err)
	}
	p := events[1].Payload.(*journal.MessageDispatched)
	if !strings.Contains(p.Text(), "shaped by target billing's transform") {
		t.Errorf("text %q", p.Text())
	}

	cancelled := ingest(`{"id": "in-2"}`, map[string]string{"x-test": "1"})
	if d := of(cancelled, "billing"); d.State != lifecycle.StateSkipped || !d.Shaped || d.LastError != "cancelled by target billing's transform: test traffic" {
		t.Errorf("cancelled: %s, %q", d.State, d.LastError)
	}
	failed := ingest(`{"amount": 5}`, nil)
	if d := of(failed, "billing"); d.State != lifecycle.StateFailed || !strings.Contains(d.LastError, "target billing's transform failed: no such key: id") {
		t.Errorf("failed: %s, %q", d.State, d.LastError)
	}
	for _, w := range b.wake.take() {
		if w.Target == "billing" && w.DeliveryID != d.ID {
			t.Errorf("a settled delivery was woken: %+v", w)
		}
	}
	// A cancelled one's redelivery's claim reads the cancel, and sends nothing.
	if _, err := b.w.Redeliver(b.ctx, cancelled.ID, of(cancelled, "billing").ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	if c, err := b.w.Claim(b.ctx, of(cancelled, "billing").ID, time.Minute); err != nil || !c.Shape.Settled() {
		t.Fatalf("a cancelled delivery redelivered: claim %+v, %v", c, err)
	}

	// A changed transform shapes what is made after it: the resend of the
	// failed one succeeds.
	target.Transform = `{"payload": {"ref": message.payload.?id.orValue("none")}}`
	if _, err := b.w.UpdateTarget(b.ctx, target, admin); err != nil {
		t.Fatal(err)
	}
	b.w.Invalidate()
	if _, err := b.w.Skip(b.ctx, failed.ID, of(failed, "plain").ID, commands.Action{Operator: "admin"}); err != nil {
		t.Fatal(err)
	}
	resent, err := b.w.Resend(b.ctx, failed.ID, []string{"billing"}, commands.Action{Operator: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	nd := of(resent, "billing")
	if nd.State != lifecycle.StateQueued {
		t.Fatalf("resent: %s", nd.State)
	}
	if c, err := b.w.Claim(b.ctx, nd.ID, time.Minute); err != nil || c.Shape == nil || string(c.Shape.Body) != `{"ref":"none"}` {
		t.Fatalf("resent claim: %+v, %v", c.Shape, err)
	}
	b.audit(t)

	// Retention's expunge of a payload deletes the shaped ones with it.
	count := func() (n int) {
		t.Helper()
		if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM delivery_shapes WHERE message_id = $1`, shaped.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d shapes kept of the shaped message, want 1", n)
	}
	batch := &pgx.Batch{}
	projection.QueueDeletePayloads(batch, []uuid.UUID{shaped.ID})
	if err := b.db.SendBatch(b.ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d shapes left after the payload's deletion", n)
	}
}

// TestTransformPayloadBound: a transform's payload over the Writer's
// MaxPayload fails its delivery, naming the bound, as the delivery is
// made and in a trial; the same transform within it shapes the delivery.
func TestTransformPayloadBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now}, DB: b.db, MaxPayload: 64})
	if err != nil {
		t.Fatal(err)
	}
	target := lifecycle.Target{Name: "billing", Kind: "http", Enabled: true, Config: sinkConfig,
		Transform: `{"payload": {"copies": [message.payload, message.payload]}}`}
	if _, err := w.CreateTarget(b.ctx, target, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, admin); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		payload, fails string
	}{
		{`{"id": "in-1"}`, ""},
		{`{"id": "in-2", "note": "long enough to pass the bound twice"}`, "payload: more than 64 bytes"},
	} {
		in := newMessage()
		in.ContentType, in.Payload = "application/json", []byte(tc.payload)
		m, _, err := w.Ingest(b.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		d := m.Deliveries[0]
		if tc.fails == "" && (d.State != lifecycle.StateQueued || !d.Shaped) ||
			tc.fails != "" && (d.State != lifecycle.StateFailed || !strings.Contains(d.LastError, "target billing's transform failed: "+tc.fails)) {
			t.Errorf("%s: %s, %q", tc.payload, d.State, d.LastError)
		}
		trial, err := w.Try(b.ctx, commands.RoutingMessage(m, in.Payload))
		if err != nil {
			t.Fatal(err)
		}
		if s := trial.Shapes["billing"]; s == nil || !strings.Contains(s.Error, tc.fails) || (tc.fails == "") != (s.Error == "") {
			t.Errorf("%s: tried, %+v", tc.payload, s)
		}
	}
}
