package intake

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/projection"
)

// traceIngest starts, with tracing on (t not nil), the ingest span of a
// message a source read, which starts a trace: a source brings none. in
// then keeps the span's context. The span is nil with tracing off.
func traceIngest(ctx context.Context, t trace.Tracer, in *commands.NewMessage) (context.Context, trace.Span) {
	if t == nil {
		return ctx, nil
	}
	ctx, span, tc := tracing.StartIngest(ctx, t, in.Trace, in.Source, trace.SpanKindConsumer)
	in.Trace = tc
	return ctx, span
}

// endIngest ends span, when there is one, with what was stored.
func endIngest(span trace.Span, m *projection.Message, created bool, err error) {
	switch {
	case span == nil:
	case m == nil:
		tracing.EndIngest(span, "", nil, "", false, err)
	default:
		tracing.EndIngest(span, m.ID.String(), m.CurrentTargets(), m.Status, created, err)
	}
}
