package tracing

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/lifecycle"
)

// statusCodeKey is the attribute of an attempt's or a callback's span
// that holds the HTTP status of its answer; its client span has it as
// http.response.status_code.
const statusCodeKey = attribute.Key("waybill.status_code")

// Transport wraps base so that a request whose context holds a valid span
// (an attempt's, a callback's) is sent inside an HTTP client span, a
// child of it, that follows the semantic conventions (url.full by
// redactURL), with that client span as the traceparent and tracestate it
// carries to the receiver; and, when withBaggage, with the baggage the
// context holds (WithBaggage). A request without a span goes as it is:
// tracing off costs a context lookup.
func Transport(base http.RoundTripper, withBaggage bool) http.RoundTripper {
	return &transport{base: base, baggage: withBaggage}
}

type transport struct {
	base    http.RoundTripper
	baggage bool
}

// baggageKey is the context key of the baggage a request may carry.
type baggageKey struct{}

// WithBaggage is ctx with the trace's baggage, which Transport sends when
// its target opts in.
func WithBaggage(ctx context.Context, t lifecycle.Trace) context.Context {
	if t.Baggage == "" {
		return ctx
	}
	return context.WithValue(ctx, baggageKey{}, t.Baggage)
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return t.base.RoundTrip(req)
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(req.Method), semconv.URLFull(RedactURL(req.URL.String())),
		semconv.ServerAddress(req.URL.Hostname())}
	port, err := strconv.Atoi(req.URL.Port())
	if err != nil {
		port = map[string]int{"http": 80, "https": 443}[req.URL.Scheme]
	}
	attrs = append(attrs, semconv.ServerPort(port))
	ctx, span := parent.TracerProvider().Tracer(scope).Start(ctx, req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
	defer span.End()
	req = req.Clone(ctx)
	inject(ctx, req.Header)
	if b, ok := ctx.Value(baggageKey{}).(string); ok && t.baggage {
		req.Header.Set(baggageHeader, b)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	parent.SetAttributes(statusCodeKey.Int(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}
