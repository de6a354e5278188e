package commands

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/google/uuid"

	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/projection"
)

// traced records the span name of a command on m, from start until now,
// as a child of m's trace: the message's, not the request's, so that the
// actions on it, days later, are found under its trace. Nothing when
// tracing is off or the command found no message.
func (w *Writer) traced(ctx context.Context, name string, start time.Time, m *projection.Message, attrs ...attribute.KeyValue) {
	if w.tracer == nil || m == nil {
		return
	}
	_, span := w.tracer.Start(tracing.Remote(ctx, m.Trace), name, trace.WithTimestamp(start),
		trace.WithAttributes(append(attrs, semconv.MessagingMessageID(m.ID.String()))...))
	span.End()
}

// traceAction records the span of an operator's action on m, on the
// delivery when it names one.
func (w *Writer) traceAction(ctx context.Context, name string, start time.Time, m *projection.Message, a Action, deliveryID uuid.UUID) {
	if w.tracer == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("waybill.operator", a.Operator)}
	if deliveryID != uuid.Nil {
		attrs = append(attrs, attribute.String("waybill.delivery.id", deliveryID.String()))
	}
	w.traced(ctx, name, start, m, attrs...)
}

// traceOperation records the span of a bulk operation's batch, linked to
// the trace of each message it took: one span for the batch keeps the
// cost of a large operation to one span per batch, and each message's
// trace leads to it.
func (w *Writer) traceOperation(ctx context.Context, start time.Time, o *projection.Operation, ops []*op) {
	if w.tracer == nil {
		return
	}
	links := make([]trace.Link, 0, len(ops))
	done := 0
	for _, p := range ops {
		if p.c == nil {
			continue
		}
		done++
		if sc := tracing.SpanContext(p.c.after.Trace); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	_, span := w.tracer.Start(ctx, "operation batch", trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("waybill.operation.id", o.ID.String()),
			attribute.String("waybill.operation.action", string(o.Action)), attribute.Int("waybill.operation.messages", len(ops)),
			attribute.Int("waybill.operation.done", done)))
	span.End()
}

// traceReceipt records the span of a receipt for a delivery of m:
// whether it was positive and final, and whether it was refused.
func (w *Writer) traceReceipt(ctx context.Context, start time.Time, m *projection.Message, deliveryID uuid.UUID, actor string,
	positive, final bool, err error) {
	if w.tracer == nil {
		return
	}
	w.traced(ctx, "receipt", start, m, attribute.String("waybill.delivery.id", deliveryID.String()), attribute.String("waybill.actor", actor),
		attribute.Bool("waybill.receipt.positive", positive), attribute.Bool("waybill.receipt.final", final),
		attribute.Bool("waybill.receipt.refused", err != nil))
}

// sampledTraceID is the id of m's trace when tracing is on and the trace
// is sampled, so its spans were exported; "" otherwise.
func (w *Writer) sampledTraceID(m *projection.Message) string {
	if w.tracer == nil {
		return ""
	}
	if sc := tracing.SpanContext(m.Trace); sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}
