package commands_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// TestSpansOfAMessage: with tracing on, a receipt and an operator's
// action on a message are spans of the message's trace, children of the
// context it keeps, and a bulk operation's batch is one span linked to
// the messages it took.
func TestSpansOfAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), DB: b.db,
		Base: service.Base{Now: b.clock.Now, Tracer: tp.Tracer("test")}})
	if err != nil {
		t.Fatal(err)
	}
	b.targets(t, "alpha")
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	in := newMessage()
	in.Trace = lifecycle.Trace{Parent: "00-" + traceID + "-" + spanID + "-01", State: "vendor=x"}
	m, _, err := w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if stored, err := projection.Load(b.ctx, b.db, m.ID); err != nil || stored.Trace != in.Trace {
		t.Fatalf("stored trace %+v, %v; want %+v", stored.Trace, err, in.Trace)
	}
	d := m.Deliveries[0]
	c, err := w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Complete(b.ctx, d.ID, c.Token, lifecycle.AwaitingAck("202", b.clock.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Receipt(b.ctx, d.ID, false, "rejected", "operator:alpha"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Redeliver(b.ctx, m.ID, d.ID, commands.Action{Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	other := b.ingest(t)
	o, err := w.CreateOperation(b.ctx, commands.OperationSpec{Action: lifecycle.ActionSkip, Reason: "gone", Filter: lifecycle.OperationFilter{Source: "erp"}}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Operate(b.ctx, o, []uuid.UUID{m.ID, other.ID}); err != nil {
		t.Fatal(err)
	}

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	for _, name := range []string{"receipt", "redeliver"} {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no %s span among %v", name, byName)
		}
		if s.Parent().TraceID().String() != traceID || s.Parent().SpanID().String() != spanID ||
			s.SpanContext().TraceID().String() != traceID || s.SpanContext().TraceState().String() != "vendor=x" {
			t.Errorf("%s: parent %v, context %v; want the message's", name, s.Parent(), s.SpanContext())
		}
	}
	batch, ok := byName["operation batch"]
	if !ok {
		t.Fatalf("no batch span among %v", byName)
	}
	// The other message was ingested without a trace: only the first
	// links.
	if links := batch.Links(); len(links) != 1 || links[0].SpanContext.SpanID().String() != spanID {
		t.Errorf("batch links %v; want the traced message's context", links)
	}
}
