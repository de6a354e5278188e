package httpapi

import (
	"context"
	"net/http"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/projection"
)

// traceIngest sets in's trace context from the request's traceparent,
// tracestate and baggage, and, with tracing on, starts the ingest's span
// as their child (a new trace without them), which in then continues. The
// context returned carries the span; end ends it with what the ingest
// stored, or its error. With tracing off the message keeps what the
// sender brought, and no span is made.
func (s *Server) traceIngest(r *http.Request, in *commands.NewMessage) (ctx context.Context, end func(*projection.Message, bool, error)) {
	in.Trace = tracing.FromHeader(r.Header)
	if s.cfg.Tracer == nil {
		if in.Trace.Parent == "" {
			in.Trace.Baggage = ""
		}
		return r.Context(), func(*projection.Message, bool, error) {}
	}
	ctx, span, t := tracing.StartIngest(r.Context(), s.cfg.Tracer, in.Trace, in.Source, trace.SpanKindServer,
		semconv.HTTPRequestMethodPost, semconv.HTTPRoute(Prefix+"/messages"))
	in.Trace = t
	return ctx, func(m *projection.Message, created bool, err error) {
		if m == nil {
			tracing.EndIngest(span, "", nil, "", false, err)
			return
		}
		tracing.EndIngest(span, m.ID.String(), m.CurrentTargets(), m.Status, created, err)
	}
}
