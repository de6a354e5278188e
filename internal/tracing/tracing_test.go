package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/lifecycle"
)

// otelVars are every variable FromEnv reads, cleared before each case.
var otelVars = []string{"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		// want is the endpoint, protocol, service name and sampler's
		// description; wantErr a part of the error.
		want    [4]string
		wantErr string
	}{
		{name: "nothing set: off"},
		{name: "disabled wins", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "defaults", env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			want: [4]string{"http://127.0.0.1:4318", ProtocolHTTP, "waybill",
				"ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"}},
		{name: "the traces' own", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b:2/t",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "edge",
			"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
			want: [4]string{"https://b:2/t", ProtocolGRPC, "edge", "TraceIDRatioBased{0.25}"}},
		{name: "always off", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_TRACES_SAMPLER": "always_off"},
			want: [4]string{"http://a:1", ProtocolHTTP, "waybill", "AlwaysOffSampler"}},
		{name: "bad disabled", env: map[string]string{"OTEL_SDK_DISABLED": "yes"}, wantErr: `OTEL_SDK_DISABLED="yes": allowed are true, false`},
		{name: "bad endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"},
			wantErr: `OTEL_EXPORTER_OTLP_ENDPOINT="127.0.0.1:4318": must be an http:// or https:// URL`},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": allowed are http/protobuf, grpc`},
		{name: "bad sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_TRACES_SAMPLER": "jaeger_remote"},
			wantErr: `OTEL_TRACES_SAMPLER="jaeger_remote": allowed are`},
		{name: "bad ratio", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: `OTEL_TRACES_SAMPLER_ARG="2": must be a ratio from 0 to 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range otelVars {
				t.Setenv(v, c.env[v])
			}
			cfg, err := FromEnv()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v; want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sampler string
			if cfg.Sampler != nil {
				sampler = cfg.Sampler.Description()
			}
			if got := [4]string{cfg.Endpoint, cfg.Protocol, cfg.ServiceName, sampler}; got != c.want {
				t.Errorf("got %q\nwant %q", got, c.want)
			}
			if cfg.Enabled() != (c.want[0] != "") {
				t.Errorf("enabled %v with endpoint %q", cfg.Enabled(), cfg.Endpoint)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://user:secret@hooks.example.com:8443/in/path?token=abc&x=1#frag": "https://hooks.example.com:8443/in/path",
		"http://127.0.0.1:9/a?":         "http://127.0.0.1:9/a",
		"http://user@example.com/":      "http://example.com/",
		"http://[::1]:80/p":             "http://[::1]:80/p",
		"http://example.com/%zz":        "",
		"https://example.com/a%2Fb?q=1": "https://example.com/a%2Fb",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q; want %q", raw, got, want)
		}
	}
}

func TestTraceContextRoundTrip(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{}
	h.Set("Traceparent", parent)
	h.Set("Tracestate", "vendor=x")
	h.Add("Baggage", "user=alice")
	h.Add("Baggage", "tenant=acme")
	got := FromHeader(h)
	want := lifecycle.Trace{Parent: parent, State: "vendor=x", Baggage: "user=alice,tenant=acme"}
	if got != want {
		t.Fatalf("FromHeader = %+v; want %+v", got, want)
	}
	sc := SpanContext(got)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsSampled() {
		t.Errorf("span context %+v", sc)
	}
	out := http.Header{}
	inject(Remote(context.Background(), got), out)
	if out.Get("traceparent") != parent || out.Get("tracestate") != "vendor=x" || out.Get("baggage") != "" {
		t.Errorf("injected %v", out)
	}

	bad := http.Header{}
	bad.Set("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	bad.Set("tracestate", "vendor=x")
	if got := FromHeader(bad); !got.IsZero() {
		t.Errorf("an invalid traceparent gave %+v", got)
	}
	alone := http.Header{}
	alone.Set("baggage", "tenant=acme")
	if got := FromHeader(alone); got != (lifecycle.Trace{Baggage: "tenant=acme"}) {
		t.Errorf("baggage alone gave %+v", got)
	}
	none := http.Header{}
	inject(context.Background(), none)
	if len(none) != 0 {
		t.Errorf("no span injected %v", none)
	}
	if !Reserved("TraceParent") || !Reserved("baggage") || Reserved("webhook-id") {
		t.Error("Reserved")
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("part", "test")
	sc := SpanContext(lifecycle.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "with")
	log.Info("without")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var with, without map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &with); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &without); err != nil {
		t.Fatal(err)
	}
	if with["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || with["span_id"] != "00f067aa0ba902b7" || with["part"] != "test" {
		t.Errorf("with a span: %v", with)
	}
	if _, ok := without["trace_id"]; ok {
		t.Errorf("without a span: %v", without)
	}
}
