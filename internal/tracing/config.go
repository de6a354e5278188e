package tracing

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The protocols of OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// DefaultServiceName is the service.name of the spans when
// OTEL_SERVICE_NAME is not set.
const DefaultServiceName = "waybill"

// Config is the tracing the standard OTEL_* environment asks for.
type Config struct {
	// Endpoint is the OTLP collector's URL; empty: tracing is off.
	Endpoint string
	// Protocol is ProtocolHTTP or ProtocolGRPC.
	Protocol    string
	ServiceName string
	Sampler     sdktrace.Sampler
}

// Enabled says spans are made and exported.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// FromEnv reads the configuration from the OTEL_* environment: tracing is
// on when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
// is set and OTEL_SDK_DISABLED is not true. A value it cannot take is an
// error naming the variable and what it allows.
func FromEnv() (Config, error) {
	switch v := os.Getenv("OTEL_SDK_DISABLED"); strings.ToLower(v) {
	case "true":
		return Config{}, nil
	case "false", "":
	default:
		return Config{}, fmt.Errorf("OTEL_SDK_DISABLED=%q: allowed are true, false", v)
	}
	name, endpoint := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		name, endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" {
		return Config{}, nil
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, fmt.Errorf("%s=%q: must be an http:// or https:// URL", name, endpoint)
	}
	c := Config{Endpoint: endpoint, Protocol: ProtocolHTTP, ServiceName: DefaultServiceName}
	name, protocol := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		name, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", ProtocolHTTP:
	case ProtocolGRPC:
		c.Protocol = ProtocolGRPC
	default:
		return Config{}, fmt.Errorf("%s=%q: allowed are %s, %s", name, protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		c.ServiceName = v
	}
	var err error
	c.Sampler, err = samplerFromEnv()
	return c, err
}

// samplerFromEnv is the sampler of OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG; by default every trace a sender did not
// decide against (parentbased_always_on).
func samplerFromEnv() (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		v := os.Getenv("OTEL_TRACES_SAMPLER_ARG")
		if v == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: must be a ratio from 0 to 1", v)
		}
		return r, nil
	}
	switch v := os.Getenv("OTEL_TRACES_SAMPLER"); v {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if v == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: allowed are always_on, always_off, traceidratio, "+
			"parentbased_always_on, parentbased_always_off, parentbased_traceidratio", v)
	}
}
