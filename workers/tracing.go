package workers

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// tracedDeliverer makes each piece of work's span, a child of the trace
// context of its message, around its Deliverer, whose requests carry the
// span on.
type tracedDeliverer[T any] struct {
	tracer trace.Tracer
	next   Deliverer[T]
	// span names the work's span and gives its parent, kind and first
	// attributes.
	span func(T) (name string, parent lifecycle.Trace, kind trace.SpanKind, attrs []attribute.KeyValue)
}

// traced is next with a span per piece of work when tracing is on (t not
// nil), and next itself when it is off, which then costs nothing.
func traced[T any](t trace.Tracer, next Deliverer[T],
	span func(T) (string, lifecycle.Trace, trace.SpanKind, []attribute.KeyValue)) Deliverer[T] {
	if t == nil {
		return next
	}
	return &tracedDeliverer[T]{tracer: t, next: next, span: span}
}

// Deliver delivers work inside its span, which records the outcome and
// how long it took.
func (d *tracedDeliverer[T]) Deliver(ctx context.Context, work T) lifecycle.Outcome {
	name, parent, kind, attrs := d.span(work)
	ctx, span := d.tracer.Start(tracing.WithBaggage(tracing.Remote(ctx, parent), parent), name, trace.WithSpanKind(kind),
		trace.WithAttributes(attrs...))
	defer span.End()
	start := time.Now()
	o := d.next.Deliver(ctx, work)
	span.SetAttributes(attribute.String("waybill."+name+".outcome", string(o.Kind)),
		attribute.Float64("waybill."+name+".duration", time.Since(start).Seconds()))
	if o.Kind == lifecycle.OutcomeRetry || o.Kind == lifecycle.OutcomeFailed {
		span.SetStatus(codes.Error, o.Text)
	}
	return o
}

// attemptSpan is the span of an attempt: a child of the message's trace.
func attemptSpan(a targets.Attempt) (string, lifecycle.Trace, trace.SpanKind, []attribute.KeyValue) {
	return "attempt", a.Trace, trace.SpanKindProducer, []attribute.KeyValue{
		semconv.MessagingSystemKey.String("waybill"), semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("attempt"), semconv.MessagingDestinationName(a.Target),
		semconv.MessagingMessageID(a.MessageID.String()),
		attribute.String("waybill.target", a.Target), attribute.String("waybill.delivery.id", a.DeliveryID.String()),
		attribute.Int("waybill.attempt.number", a.Number),
	}
}

// callbackSpan is the span of an outcome callback's call: a child of the
// message's trace.
func callbackSpan(c CallbackWork) (string, lifecycle.Trace, trace.SpanKind, []attribute.KeyValue) {
	return "callback", c.Trace, trace.SpanKindInternal, []attribute.KeyValue{
		semconv.MessagingMessageID(c.MessageID.String()),
		attribute.Int("waybill.callback.seq", c.Seq), attribute.Int("waybill.callback.attempt", c.Attempt),
	}
}
