// Package tracing owns the process's OpenTelemetry traces: the provider
// the OTEL_* environment configures (a Service whose stop flushes the
// spans), the W3C trace context a message keeps and hands on, the slog
// handler that adds the trace and span ids to a log line, and the form of
// a URL a span may carry. With tracing off there is no SDK at work: the
// parts hold a nil trace.Tracer and make no span.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/lifecycle"
)

// scope is the instrumentation scope of Waybill's spans.
const scope = "github.com/waybill/waybill"

// The headers of the W3C trace context, which a target's configured
// headers may not set: Waybill sets them.
const (
	traceParentHeader = "traceparent"
	traceStateHeader  = "tracestate"
	baggageHeader     = "baggage"
)

// Reserved says a header name (any case) is one of the trace context's.
func Reserved(name string) bool {
	switch strings.ToLower(name) {
	case traceParentHeader, traceStateHeader, baggageHeader:
		return true
	}
	return false
}

// Provider is the process's tracer provider: none when tracing is off.
type Provider struct {
	tp  *sdktrace.TracerProvider
	log *slog.Logger
}

// New makes the provider cfg asks for, exporting in batches over OTLP to
// its endpoint (the exporter reads the other OTEL_EXPORTER_OTLP_*
// variables: headers, timeout, certificates); with tracing off, a
// Provider whose Tracer is nil. Export errors are logged on log.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Provider, error) {
	p := &Provider{log: log}
	if !cfg.Enabled() {
		return p, nil
	}
	var (
		exp *otlptrace.Exporter
		err error
	)
	if cfg.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// over the default name.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: the resource: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(cfg.Sampler))
	log.Info("tracing on", "endpoint", RedactURL(cfg.Endpoint), "protocol", cfg.Protocol, "service", cfg.ServiceName,
		"sampler", cfg.Sampler.Description())
	return p, nil
}

// Tracer is the tracer every part of the process makes its spans with;
// nil when tracing is off.
func (p *Provider) Tracer() trace.Tracer {
	if p.tp == nil {
		return nil
	}
	return p.tp.Tracer(scope)
}

// Start does nothing: the provider is ready once made.
func (p *Provider) Start(context.Context) error { return nil }

// Stop exports the spans still held, within ctx, and ends the provider.
func (p *Provider) Stop(ctx context.Context) {
	if p.tp == nil {
		return
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		p.log.Warn("tracing: stop", "err", err)
	}
}

var w3c = propagation.TraceContext{}

// FromHeader is the trace context a request brought: its traceparent and
// tracestate when the traceparent is valid (a tracestate over
// lifecycle.MaxTraceStateLength is dropped), and its baggage headers, as sent, when they parse and fit
// lifecycle.MaxBaggageLength; the rest is dropped. Baggage without a
// traceparent is kept only for an ingest span to give it one.
func FromHeader(h http.Header) lifecycle.Trace {
	var t lifecycle.Trace
	if h.Get(traceParentHeader) != "" {
		sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.HeaderCarrier(h)))
		if sc.IsValid() {
			t.Parent, t.State = parentOf(sc), sc.TraceState().String()
		}
		if len(t.State) > lifecycle.MaxTraceStateLength {
			t.State = ""
		}
	}
	if v := h.Values(baggageHeader); len(v) > 0 {
		// Kept as sent: baggage's own String orders the members anew.
		raw := strings.Join(v, ",")
		if b, err := baggage.Parse(raw); err == nil && b.Len() > 0 && len(raw) <= lifecycle.MaxBaggageLength {
			t.Baggage = raw
		}
	}
	return t
}

// Remote is ctx with t's span context as the remote parent of the spans
// started on it; ctx itself when t has none.
func Remote(ctx context.Context, t lifecycle.Trace) context.Context {
	if t.Parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &carrier{t.Parent, t.State})
}

// SpanContext is t's span context, invalid when it has none: what a span
// links to.
func SpanContext(t lifecycle.Trace) trace.SpanContext {
	return trace.SpanContextFromContext(Remote(context.Background(), t))
}

// continued is t with the traceparent and tracestate of span, which the
// message's later spans then continue; t's baggage stays.
func continued(t lifecycle.Trace, span trace.Span) lifecycle.Trace {
	sc := span.SpanContext()
	if !sc.IsValid() {
		return t
	}
	t.Parent, t.State = parentOf(sc), sc.TraceState().String()
	return t
}

// inject sets the traceparent, and the tracestate when there is one, of
// the span in ctx on h; it sets nothing when ctx holds no valid span.
func inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// parentOf is the traceparent of sc.
func parentOf(sc trace.SpanContext) string {
	var c carrier
	w3c.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), &c)
	return c.parent
}

// carrier holds a traceparent and a tracestate for the propagator.
type carrier struct{ parent, state string }

func (c carrier) Get(key string) string {
	switch key {
	case traceParentHeader:
		return c.parent
	case traceStateHeader:
		return c.state
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case traceParentHeader:
		c.parent = value
	case traceStateHeader:
		c.state = value
	}
}

func (c carrier) Keys() []string { return []string{traceParentHeader, traceStateHeader} }

// RedactURL is the form of a URL that leaves the configuration, in a span
// (url.full) or an outcome's text: without its user information, whose
// password is a secret, and without its query and fragment, which may hold
// tokens. A URL that does not parse is "".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// LogHandler wraps h so that a record logged with a context holding a
// valid span (slog's …Context methods) carries trace_id and span_id.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

func (h logHandler) WithGroup(name string) slog.Handler { return logHandler{h.Handler.WithGroup(name)} }
