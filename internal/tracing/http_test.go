package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/waybill/waybill/lifecycle"
)

// TestTransport: a request made inside a span goes inside an HTTP client
// span, its child, whose context the receiver gets, with the baggage only
// when the transport passes it on; a request without a span goes as it is.
func TestTransport(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tc := lifecycle.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Baggage: "tenant=acme"}

	for _, withBaggage := range []bool{false, true} {
		client := &http.Client{Transport: Transport(http.DefaultTransport, withBaggage)}
		ctx, attempt := tp.Tracer("test").Start(WithBaggage(Remote(context.Background(), tc), tc), "attempt")
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://user:pw@"+srv.Listener.Addr().String()+"/in?token=x", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		attempt.End()
		h := <-got
		spans := rec.Ended()
		span := spans[len(spans)-2]
		if span.Name() != "POST" || span.Parent().SpanID() != attempt.SpanContext().SpanID() {
			t.Fatalf("client span %q under %v", span.Name(), span.Parent())
		}
		if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span.SpanContext().SpanID().String() + "-01"; h.Get("traceparent") != want {
			t.Errorf("traceparent %q; want %q", h.Get("traceparent"), want)
		}
		if wantBaggage := map[bool]string{true: "tenant=acme"}[withBaggage]; h.Get("baggage") != wantBaggage {
			t.Errorf("with baggage %v: baggage %q", withBaggage, h.Get("baggage"))
		}
		attrs := map[string]string{}
		for _, a := range span.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["url.full"] != "http://"+srv.Listener.Addr().String()+"/in" || attrs["http.response.status_code"] != "202" ||
			attrs["http.request.method"] != "POST" || attrs["server.address"] != "127.0.0.1" {
			t.Errorf("client span attributes %v", attrs)
		}
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := (&http.Client{Transport: Transport(http.DefaultTransport, true)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-got; h.Get("traceparent") != "" || h.Get("baggage") != "" {
		t.Errorf("without a span: %v", h)
	}
}
