package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/lifecycle"
)

// StartIngest starts the ingest span of a message of source, a child of
// the trace context t its sender brought (a new trace without one), of
// kind and with attrs besides the ingest's own. It returns ctx with the
// span, the span, and the trace context the message keeps: the span's,
// with t's baggage.
func StartIngest(ctx context.Context, tr trace.Tracer, t lifecycle.Trace, source string, kind trace.SpanKind,
	attrs ...attribute.KeyValue) (context.Context, trace.Span, lifecycle.Trace) {
	attrs = append(attrs, semconv.MessagingSystemKey.String("waybill"), semconv.MessagingOperationTypeReceive,
		semconv.MessagingOperationName("ingest"), attribute.String("waybill.source", source))
	ctx, span := tr.Start(Remote(ctx, t), "ingest", trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, span, continued(t, span)
}

// EndIngest ends an ingest's span with what was stored: the message's
// id, the targets its routes matched, its status and whether it is new;
// or with err.
func EndIngest(span trace.Span, id string, targets []string, status lifecycle.MessageStatus, created bool, err error) {
	defer span.End()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetAttributes(semconv.MessagingMessageID(id), attribute.Bool("waybill.message.new", created),
		attribute.StringSlice("waybill.targets", targets), attribute.String("waybill.status", string(status)))
}
