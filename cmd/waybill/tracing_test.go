package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/waybill/waybill/internal/testpoll"
)

// collector is an OTLP/HTTP receiver of spans, in the test's process.
type collector struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	requests int
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = z
		}
		data, _ := io.ReadAll(body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(data, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		c.keep(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// keep keeps the spans of an export.
func (c *collector) keep(req *collectortrace.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.services = append(c.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
}

// grpcCollector is an OTLP/gRPC receiver of spans, in the test's process,
// on a loopback port; it keeps them in a collector.
type grpcCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	*collector
	addr string
}

func newGRPCCollector(t *testing.T) *grpcCollector {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &grpcCollector{collector: &collector{}, addr: l.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return c
}

// Export implements the OTLP trace service.
func (c *grpcCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.keep(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// find is the spans of the trace with that name.
func (c *collector) find(traceID, name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if hex.EncodeToString(s.TraceId) == traceID && s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// bySource is the ingest spans of the source's messages.
func (c *collector) bySource(source string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.Name == "ingest" && attrs(s)["waybill.source"] == source {
			out = append(out, s)
		}
	}
	return out
}

// attrs are a span's attributes as text.
func attrs(s *tracepb.Span) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attributes {
		v := a.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[a.Key] = v.GetStringValue()
		case v.GetArrayValue() != nil:
			var items []string
			for _, item := range v.GetArrayValue().Values {
				items = append(items, item.GetStringValue())
			}
			out[a.Key] = strings.Join(items, ",")
		default:
			out[a.Key] = v.String() // int_value:200 and the like
		}
	}
	return out
}

// headerSink is a receiver of deliveries and callbacks that keeps the
// trace headers each request brought, by path.
type headerSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string][]http.Header
}

func newHeaderSink(t *testing.T) *headerSink {
	s := &headerSink{got: map[string][]http.Header{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.got[r.URL.Path] = append(s.got[r.URL.Path], r.Header.Clone())
		s.mu.Unlock()
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *headerSink) headers(path string) []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.got[path]...)
}

// ingestTraced posts a message with a traceparent, a tracestate and
// baggage, and returns its id.
func ingestTraced(t *testing.T, a *api, traceparent, callbackURL string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.base+"/messages", strings.NewReader(
		`{"source":"erp","from":"acme","to":"globex","payload":"traced","callback_url":"`+callbackURL+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	req.Header.Set("tracestate", "vendor=x")
	req.Header.Set("baggage", "tenant=acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("ingest: %d %s", resp.StatusCode, data)
	}
	var m struct{ ID string }
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// tracingSetup starts a server with env on a fresh database, with an http
// target "sink" (whose URL has a password and a query, and which passes
// baggage on) routed from erp, callbacks allowed on loopback, and
// returns its client.
func tracingSetup(t *testing.T, env []string, sink *headerSink) (*server, *api) {
	t.Helper()
	_, dbURL, ns := shared(t)
	dir := t.TempDir()
	s := startServerEnv(t, buildBinary(t), env, "--database-url", dbURL, "--nats-url", ns.ClientURL(),
		"--data-dir", filepath.Join(dir, "var"))
	a := s.adminClient(t, filepath.Join(dir, "var"))
	u, _ := url.Parse(sink.srv.URL + "/in?token=s3cret")
	u.User = url.UserPassword("user", "pw")
	a.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http",
		"config": map[string]any{"url": u.String(), "propagate_baggage": true}}, http.StatusCreated, nil)
	a.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)
	a.call("PUT", "/settings", map[string]any{"callbacks": map[string]any{"allowed_networks": []string{"127.0.0.0/8", "::1/128"}}},
		http.StatusOK, nil)
	return s, a
}

const (
	sentTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	sentSpanID  = "00f067aa0ba902b7"
)

// TestTracesFollowAMessage runs a server that exports traces to an OTLP
// receiver in the test, ingests a message with a traceparent and follows
// its trace: the ingest continues the sender's span, the attempt is its
// child with the HTTP client span inside it, the receiver got that client
// span as its traceparent (with the baggage the target opts in to), the
// callback carries the same trace, and an operator's redelivery joins it.
func TestTracesFollowAMessage(t *testing.T) {
	t.Parallel()
	otlp := newCollector(t)
	sink := newHeaderSink(t)
	s, a := tracingSetup(t, []string{"OTEL_SDK_DISABLED=false", "OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_TRACES_SAMPLER=parentbased_always_on", "OTEL_BSP_SCHEDULE_DELAY=50",
		"OTEL_SERVICE_NAME="}, sink)

	id := ingestTraced(t, a, "00-"+sentTraceID+"-"+sentSpanID+"-01", sink.srv.URL+"/callback")
	testpoll.Until(t, "the ingest, attempt, client and callback spans", func() bool {
		return len(otlp.find(sentTraceID, "ingest")) == 1 && len(otlp.find(sentTraceID, "attempt")) == 1 &&
			len(otlp.find(sentTraceID, "POST")) == 2 && len(otlp.find(sentTraceID, "callback")) == 1
	})
	ingest := otlp.find(sentTraceID, "ingest")[0]
	if hex.EncodeToString(ingest.ParentSpanId) != sentSpanID || ingest.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("ingest span: parent %x, kind %v; want the sender's span %s, server", ingest.ParentSpanId, ingest.Kind, sentSpanID)
	}
	if got := attrs(ingest); got["waybill.targets"] != "sink" || got["messaging.message.id"] != id || got["waybill.source"] != "erp" {
		t.Errorf("ingest attributes %v", got)
	}
	attempt := otlp.find(sentTraceID, "attempt")[0]
	if !bytes.Equal(attempt.ParentSpanId, ingest.SpanId) {
		t.Errorf("attempt's parent %x; want the ingest %x", attempt.ParentSpanId, ingest.SpanId)
	}
	got := attrs(attempt)
	for k, want := range map[string]string{"waybill.target": "sink", "waybill.attempt.outcome": "delivered",
		"messaging.destination.name": "sink", "messaging.message.id": id} {
		if got[k] != want {
			t.Errorf("attempt %s = %q; want %q (all: %v)", k, got[k], want, got)
		}
	}
	for k, want := range map[string]string{"waybill.attempt.number": "1", "waybill.status_code": "200"} {
		if !strings.Contains(got[k], want) {
			t.Errorf("attempt %s = %q; want %s", k, got[k], want)
		}
	}
	if _, ok := got["waybill.attempt.duration"]; !ok {
		t.Errorf("attempt has no duration: %v", got)
	}
	var client *tracepb.Span
	for _, span := range otlp.find(sentTraceID, "POST") {
		if bytes.Equal(span.ParentSpanId, attempt.SpanId) {
			client = span
		}
	}
	if client == nil {
		t.Fatal("no client span under the attempt")
	}
	sinkURL, _ := url.Parse(sink.srv.URL)
	got = attrs(client)
	for k, want := range map[string]string{"http.request.method": "POST", "url.full": sink.srv.URL + "/in",
		"server.address": sinkURL.Hostname()} {
		if got[k] != want {
			t.Errorf("client span %s = %q; want %q", k, got[k], want)
		}
	}
	if !strings.Contains(got["http.response.status_code"], "200") || client.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("client span: %v, kind %v", got, client.Kind)
	}

	deliveries := sink.headers("/in")
	if len(deliveries) != 1 {
		t.Fatalf("%d deliveries", len(deliveries))
	}
	h := deliveries[0]
	if want := "00-" + sentTraceID + "-" + hex.EncodeToString(client.SpanId) + "-01"; h.Get("traceparent") != want {
		t.Errorf("the receiver got traceparent %q; want %q", h.Get("traceparent"), want)
	}
	if h.Get("tracestate") != "vendor=x" || h.Get("baggage") != "tenant=acme" {
		t.Errorf("the receiver got tracestate %q, baggage %q", h.Get("tracestate"), h.Get("baggage"))
	}
	// The delivery's latency carries the trace as its exemplar, which
	// OpenMetrics serves.
	testpoll.Until(t, "the trace as the latency's exemplar", func() bool {
		return strings.Contains(openMetrics(t, s, a.token), `# {trace_id="`+sentTraceID+`"}`)
	})
	testpoll.Until(t, "the callback", func() bool { return len(sink.headers("/callback")) == 1 })
	cb := sink.headers("/callback")[0]
	if !strings.HasPrefix(cb.Get("traceparent"), "00-"+sentTraceID+"-") || cb.Get("baggage") != "" {
		t.Errorf("the callback got traceparent %q, baggage %q", cb.Get("traceparent"), cb.Get("baggage"))
	}

	var m struct {
		Deliveries []struct{ ID string }
	}
	a.call("GET", "/messages/"+id, nil, http.StatusOK, &m)
	a.call("POST", "/messages/"+id+"/deliveries/"+m.Deliveries[0].ID+"/redeliver", map[string]any{}, http.StatusOK, nil)
	testpoll.Until(t, "the redelivery's span and its attempt", func() bool {
		return len(otlp.find(sentTraceID, "redeliver")) == 1 && len(otlp.find(sentTraceID, "attempt")) == 2
	})
	redeliver := otlp.find(sentTraceID, "redeliver")[0]
	if !bytes.Equal(redeliver.ParentSpanId, ingest.SpanId) || attrs(redeliver)["waybill.delivery.id"] != m.Deliveries[0].ID {
		t.Errorf("redeliver span: parent %x, attributes %v", redeliver.ParentSpanId, attrs(redeliver))
	}
	// A source's message starts a trace of its own.
	spool := filepath.Join(t.TempDir(), "spool")
	a.call("POST", "/sources", map[string]any{"name": "drop", "kind": "directory", "config": map[string]any{
		"dir": spool, "from": "acme", "to": "globex", "interval": "50ms", "settle": "50ms"}}, http.StatusCreated, nil)
	a.call("POST", "/routes", map[string]any{"source": "drop", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, "order.txt"), []byte("from a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the source's ingest and its attempt", func() bool {
		ingests := otlp.bySource("drop")
		return len(ingests) == 1 && len(otlp.find(hex.EncodeToString(ingests[0].TraceId), "attempt")) == 1
	})
	fromFile := otlp.bySource("drop")[0]
	if fromFile.Kind != tracepb.Span_SPAN_KIND_CONSUMER || len(fromFile.ParentSpanId) != 0 {
		t.Errorf("the source's ingest: kind %v, parent %x; want a consumer span that starts its trace", fromFile.Kind, fromFile.ParentSpanId)
	}

	otlp.mu.Lock()
	services := otlp.services
	otlp.mu.Unlock()
	if len(services) == 0 || services[0] != "waybill" {
		t.Errorf("service names %v; want waybill", services)
	}
}

// TestTracesOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL grpc the spans go
// to an OTLP/gRPC receiver: the ingest continues the sender's trace, the
// attempt is its child, and the receiver got that trace.
func TestTracesOverGRPC(t *testing.T) {
	t.Parallel()
	otlp := newGRPCCollector(t)
	sink := newHeaderSink(t)
	_, a := tracingSetup(t, []string{"OTEL_SDK_DISABLED=false", "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + otlp.addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_TRACES_SAMPLER=parentbased_always_on", "OTEL_BSP_SCHEDULE_DELAY=50"}, sink)

	id := ingestTraced(t, a, "00-"+sentTraceID+"-"+sentSpanID+"-01", sink.srv.URL+"/callback")
	testpoll.Until(t, "the ingest and attempt spans", func() bool {
		return len(otlp.find(sentTraceID, "ingest")) == 1 && len(otlp.find(sentTraceID, "attempt")) == 1
	})
	ingest, attempt := otlp.find(sentTraceID, "ingest")[0], otlp.find(sentTraceID, "attempt")[0]
	if hex.EncodeToString(ingest.ParentSpanId) != sentSpanID || attrs(ingest)["messaging.message.id"] != id {
		t.Errorf("ingest span: parent %x, attributes %v", ingest.ParentSpanId, attrs(ingest))
	}
	if !bytes.Equal(attempt.ParentSpanId, ingest.SpanId) || attrs(attempt)["waybill.attempt.outcome"] != "delivered" {
		t.Errorf("attempt span: parent %x (the ingest is %x), attributes %v", attempt.ParentSpanId, ingest.SpanId, attrs(attempt))
	}
	deliveries := sink.headers("/in")
	if len(deliveries) != 1 || !strings.HasPrefix(deliveries[0].Get("traceparent"), "00-"+sentTraceID+"-") {
		t.Errorf("the receiver got %v", deliveries)
	}
}

// openMetrics is the server's /metrics in the OpenMetrics format, the one
// with exemplars.
func openMetrics(t *testing.T, s *server, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+s.addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %s", resp.Status, data)
	}
	return string(data)
}

// TestTracingOff: a server whose tracing is off (OTEL_SDK_DISABLED,
// though an endpoint is set) exports no span, even on its stop, and sends
// its receiver no trace header, though the message came with one.
func TestTracingOff(t *testing.T) {
	t.Parallel()
	otlp := newCollector(t)
	sink := newHeaderSink(t)
	s, a := tracingSetup(t, []string{"OTEL_SDK_DISABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.srv.URL}, sink)
	ingestTraced(t, a, "00-"+sentTraceID+"-"+sentSpanID+"-01", sink.srv.URL+"/callback")
	testpoll.Until(t, "the delivery and the callback", func() bool {
		return len(sink.headers("/in")) == 1 && len(sink.headers("/callback")) == 1
	})
	if body := openMetrics(t, s, a.token); strings.Contains(body, `# {trace_id=`) {
		t.Errorf("an exemplar with tracing off:\n%s", body)
	}
	stopServer(t, s)
	for _, h := range append(sink.headers("/in"), sink.headers("/callback")...) {
		for _, name := range []string{"traceparent", "tracestate", "baggage"} {
			if v := h.Get(name); v != "" {
				t.Errorf("the receiver got %s %q", name, v)
			}
		}
	}
	otlp.mu.Lock()
	defer otlp.mu.Unlock()
	if otlp.requests != 0 {
		t.Errorf("%d exports with tracing off", otlp.requests)
	}
}
