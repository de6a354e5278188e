package targets

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// fieldErrors returns the field errors in err, in order, and fails the test
// when err holds anything else.
func fieldErrors(t *testing.T, err error) []*lifecycle.FieldError {
	t.Helper()
	if err == nil {
		return nil
	}
	if fe, ok := err.(*lifecycle.FieldError); ok {
		return []*lifecycle.FieldError{fe}
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("%T is not a *lifecycle.FieldError: %v", err, err)
	}
	var out []*lifecycle.FieldError
	for _, e := range joined.Unwrap() {
		out = append(out, fieldErrors(t, e)...)
	}
	return out
}

func fieldNames(t *testing.T, err error) []string {
	t.Helper()
	var names []string
	for _, fe := range fieldErrors(t, err) {
		names = append(names, fe.Field)
	}
	return names
}

// target is a target of kind with config, every other field left out.
func target(kind, config string) lifecycle.Target {
	return lifecycle.Target{Name: "alpha", Kind: kind, Enabled: true, Config: json.RawMessage(config)}
}

// clockTime is the time of the clock the tests' Deliverers are made with:
// far from the machine's, so that a time read from the machine's clock
// shows.
var clockTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func clock() time.Time { return clockTime }

// prepare prepares a valid target and makes its Deliverer, its clock
// stopped at clockTime.
func prepare(t *testing.T, kind, config string) Deliverer {
	t.Helper()
	prepared, err := Prepare(target(kind, config))
	if err != nil {
		t.Fatalf("prepare %s %s: %v", kind, config, err)
	}
	d, err := New(prepared, nil, clock)
	if err != nil {
		t.Fatalf("new %s %s: %v", kind, config, err)
	}
	return d
}

// attempt is attempt number n at one fixed delivery.
func attempt(n int, payload string) Attempt {
	return Attempt{
		MessageID:   uuid.MustParse("0190f5d2-0000-7000-8000-000000000001"),
		DeliveryID:  uuid.MustParse("0190f5d2-0000-7000-8000-000000000002"),
		Seq:         2,
		Target:      "alpha",
		Number:      n,
		Source:      "erp",
		From:        "acme",
		To:          "globex",
		ContentType: "application/xml",
		Payload:     []byte(payload),
	}
}

func TestRegistry(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"file", "http"}) {
		t.Errorf("Names() = %v", got)
	}
	for name, concurrency := range map[string]int{"http": 5, "file": 1} {
		k, err := Lookup(name)
		if err != nil || k.Name != name || k.Concurrency != concurrency {
			t.Errorf("Lookup(%s) = %+v, %v", name, k, err)
		}
	}
	_, err := Lookup("smtp")
	if fe := fieldErrors(t, err); len(fe) != 1 || fe[0].Field != "kind" || !strings.Contains(fe[0].Problem, "allowed are file, http") {
		t.Errorf("Lookup(smtp): %v", err)
	}
	if _, err := New(target("smtp", `{}`), nil, clock); err == nil {
		t.Error("New of an unknown kind succeeded")
	}
}

func TestPrepareFillsDefaults(t *testing.T) {
	tests := []struct {
		kind, config string
		wantConfig   string
		wantSlots    int
	}{
		{"http", `{"url":"http://127.0.0.1:9/in"}`, `{"url":"http://127.0.0.1:9/in","method":"POST"}`, 5},
		{"http", `{"url":"https://x.example/","method":"PUT","headers":{"X-Token":"t"},"timeout":"5s","tls_skip_verify":true}`,
			`{"url":"https://x.example/","method":"PUT","headers":{"X-Token":"t"},"timeout":"5s","tls_skip_verify":true}`, 5},
		{"file", `{"dir":"/var/spool/out"}`, `{"dir":"/var/spool/out","extension":"bin"}`, 1},
		{"file", `{"dir":"/out","extension":"xml","overwrite":true}`, `{"dir":"/out","extension":"xml","overwrite":true}`, 1},
	}
	for _, tt := range tests {
		got, err := Prepare(target(tt.kind, tt.config))
		if err != nil {
			t.Errorf("%s %s: %v", tt.kind, tt.config, err)
			continue
		}
		if string(got.Config) != tt.wantConfig || got.MaxConcurrent != 0 || Slots(got) != tt.wantSlots ||
			got.AttemptTimeout.D() != 30*time.Second || got.Retry.Strategy != lifecycle.RetryExponential ||
			got.Retry.Jitter == nil || got.Receipt != nil {
			t.Errorf("%s %s: prepared %+v, config %s", tt.kind, tt.config, got, got.Config)
		}
		again, err := Prepare(got)
		if err != nil || string(again.Config) != string(got.Config) || again.MaxConcurrent != got.MaxConcurrent {
			t.Errorf("%s %s: preparing twice gave %+v, %v", tt.kind, tt.config, again, err)
		}
	}

	set := target("file", `{"dir":"/out"}`)
	set.MaxConcurrent, set.AttemptTimeout = 3, lifecycle.Duration(time.Second)
	set.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Hour)}
	got, err := Prepare(set)
	if err != nil || got.MaxConcurrent != 3 || Slots(got) != 3 || got.AttemptTimeout.D() != time.Second || got.Receipt.Timeout.D() != time.Hour {
		t.Errorf("explicit values: %+v, %v", got, err)
	}
	// Slots set the slots of each process, whatever bounds the cluster.
	for _, c := range []struct{ slots, maxConcurrent, want int }{{8, 0, 8}, {2, 3, 2}, {0, 3, 3}} {
		set.Slots, set.MaxConcurrent = c.slots, c.maxConcurrent
		if got, err := Prepare(set); err != nil || got.Slots != c.slots || Slots(got) != c.want || got.Limited() != (c.maxConcurrent > 0) {
			t.Errorf("slots %d, max_concurrent %d: %+v, slots %d, %v", c.slots, c.maxConcurrent, got, Slots(got), err)
		}
	}
	empty, err := Prepare(lifecycle.Target{Name: "alpha", Kind: "file"})
	if fe := fieldErrors(t, err); len(fe) != 1 || fe[0].Field != "config.dir" || string(empty.Config) != `{}` {
		t.Errorf("no config: %v, config %s", err, empty.Config)
	}
}

func TestPrepareNamesEveryProblem(t *testing.T) {
	const url = `"url":"http://x/"`
	tests := []struct {
		name, kind, config string
		change             func(t *lifecycle.Target) // the fields besides kind and config; nil for none
		want               []string                  // the fields, in order
		words              string                    // in some problem: what is allowed
	}{
		{"unknown kind", "smtp", `{}`, nil, []string{"kind"}, "allowed are file, http"},
		{"kind not even a name", "SMTP!", `{}`, nil, []string{"kind"}, "allowed are file, http"},
		{"unknown kind and more", "smtp", `{}`, func(t *lifecycle.Target) {
			t.Name, t.AttemptTimeout = "Alpha", lifecycle.Duration(2*time.Hour)
		}, []string{"kind", "name", "attempt_timeout"}, "1ms to 1h"},
		{"name", "http", `{` + url + `}`, func(t *lifecycle.Target) { t.Name = "has space" }, []string{"name"}, "a-z"},

		{"url missing", "http", `{}`, nil, []string{"config.url"}, "http:// or https://"},
		{"url relative", "http", `{"url":"/in"}`, nil, []string{"config.url"}, ""},
		{"url of another scheme", "http", `{"url":"ftp://x/"}`, nil, []string{"config.url"}, ""},
		{"url not a string", "http", `{"url":5}`, nil, []string{"config.url"}, "must be a string"},
		{"method", "http", `{` + url + `,"method":"GET"}`, nil, []string{"config.method"}, "POST, PUT, PATCH"},
		{"method in lower case", "http", `{` + url + `,"method":"post"}`, nil, []string{"config.method"}, ""},
		{"header name", "http", `{` + url + `,"headers":{"Bad Name":"v"}}`, nil, []string{"config.headers"}, "not a header name"},
		{"header value", "http", `{` + url + `,"headers":{"X-A":"a\r\nX-B: b"}}`, nil, []string{"config.headers"}, "control characters"},
		{"header Waybill sets", "http", `{` + url + `,"headers":{"waybill-attempt":"1"}}`, nil, []string{"config.headers"}, "cannot be configured"},
		{"Idempotency-Key", "http", `{` + url + `,"headers":{"Idempotency-Key":"k"}}`, nil, []string{"config.headers"}, ""},
		{"Host", "http", `{` + url + `,"headers":{"Host":"y"}}`, nil, []string{"config.headers"}, ""},
		{"traceparent", "http", `{` + url + `,"headers":{"traceparent":"00-x"}}`, nil, []string{"config.headers"}, "W3C trace context"},
		{"Baggage", "http", `{` + url + `,"headers":{"Baggage":"a=b"}}`, nil, []string{"config.headers"}, "W3C trace context"},
		{"forward a reserved header", "http", `{` + url + `,"forward_headers":["x-tenant","Webhook-Signature"]}`, nil, []string{"config.forward_headers[1]"}, "is reserved"},
		{"forward waybill-*", "http", `{` + url + `,"forward_headers":["waybill-*"]}`, nil, []string{"config.forward_headers[0]"}, "is reserved"},
		{"forward a hop-by-hop header", "http", `{` + url + `,"forward_headers":["Connection"]}`, nil, []string{"config.forward_headers[0]"}, "is reserved"},
		{"forward traceparent", "http", `{` + url + `,"forward_headers":["traceparent"]}`, nil, []string{"config.forward_headers[0]"}, "is reserved"},
		{"forward a star inside", "http", `{` + url + `,"forward_headers":["x-*-id"]}`, nil, []string{"config.forward_headers[0]"}, "only at its end"},
		{"propagate_baggage not a bool", "http", `{` + url + `,"propagate_baggage":"yes"}`, nil, []string{"config.propagate_baggage"}, ""},
		{"one header twice", "http", `{` + url + `,"headers":{"X-A":"1","x-a":"2"}}`, nil, []string{"config.headers"}, "same header"},
		{"headers not an object", "http", `{` + url + `,"headers":["X-A"]}`, nil, []string{"config.headers"}, "object of strings"},
		{"header value not a string", "http", `{` + url + `,"headers":{"X-A":1}}`, nil, []string{"config.headers"}, "object of strings"},
		{"timeout negative", "http", `{` + url + `,"timeout":"-1s"}`, nil, []string{"config.timeout"}, "negative"},
		{"timeout not a duration", "http", `{` + url + `,"timeout":"soon"}`, nil, []string{"config.timeout"}, `"200ms"`},
		{"timeout a number", "http", `{` + url + `,"timeout":30}`, nil, []string{"config.timeout"}, `"200ms"`},
		{"tls_skip_verify not a bool", "http", `{` + url + `,"tls_skip_verify":"yes"}`, nil, []string{"config.tls_skip_verify"}, "true or false"},
		{"unknown http field", "http", `{` + url + `,"retries":3}`, nil, []string{"config.retries"},
			"allowed are forward_headers, headers, method, propagate_baggage, timeout, tls_skip_verify, url"},
		{"field in another case", "http", `{"URL":"http://x/"}`, nil, []string{"config.URL", "config.url"}, ""},
		{"config not an object", "http", `["http://x/"]`, nil, []string{"config"}, "JSON object"},
		{"config null", "file", `null`, nil, []string{"config"}, "JSON object"},
		{"config with trailing data", "file", `{"dir":"/x"} {}`, nil, []string{"config"}, "JSON object"},

		{"dir missing", "file", `{}`, nil, []string{"config.dir"}, "absolute"},
		{"dir relative", "file", `{"dir":"out"}`, nil, []string{"config.dir"}, "absolute"},
		{"extension with a dot", "file", `{"dir":"/x","extension":".xml"}`, nil, []string{"config.extension"}, "letters or digits"},
		{"extension too long", "file", `{"dir":"/x","extension":"abcdefghijklmnopq"}`, nil, []string{"config.extension"}, "1 to 16"},
		{"overwrite not a bool", "file", `{"dir":"/x","overwrite":1}`, nil, []string{"config.overwrite"}, "true or false"},
		{"unknown file field", "file", `{"dir":"/x","mode":"0600"}`, nil, []string{"config.mode"}, "allowed are dir, extension, overwrite"},

		{"max_concurrent", "http", `{` + url + `}`, func(t *lifecycle.Target) { t.MaxConcurrent = 101 },
			[]string{"max_concurrent"}, "1 to 100"},
		{"attempt_timeout", "file", `{"dir":"/x"}`, func(t *lifecycle.Target) { t.AttemptTimeout = lifecycle.Duration(-time.Second) },
			[]string{"attempt_timeout"}, "1ms to 1h"},
		{"retry", "file", `{"dir":"/x"}`, func(t *lifecycle.Target) {
			t.Retry = lifecycle.RetryPolicy{BaseDelay: lifecycle.Duration(time.Microsecond), Jitter: new(1.5)}
		}, []string{"retry.base_delay", "retry.jitter"}, "from 0 to 1"},
		{"receipt", "file", `{"dir":"/x"}`, func(t *lifecycle.Target) { t.Receipt = &lifecycle.ReceiptPolicy{} },
			[]string{"receipt.timeout"}, "1s to 720h"},

		{"the config check's at once", "http", `{"url":"x","method":"GET","timeout":"-1s"}`, nil,
			[]string{"config.url", "config.method", "config.timeout"}, ""},
		{"everything at once", "http", `{"url":"x","method":"GET","timeout":"-1s","extra":true}`, func(t *lifecycle.Target) {
			t.Name, t.MaxConcurrent = "", 200
			t.Retry.MaxAttempts = 5000
			t.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Millisecond)}
		}, []string{"name", "max_concurrent", "retry.max_attempts", "receipt.timeout",
			"config.extra", "config.url", "config.method", "config.timeout"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := target(tt.kind, tt.config)
			if tt.change != nil {
				tt.change(&in)
			}
			_, err := Prepare(in)
			if got := fieldNames(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("fields %v, want %v\n%v", got, tt.want, err)
			}
			if tt.words != "" && !strings.Contains(err.Error(), tt.words) {
				t.Errorf("no %q in %v", tt.words, err)
			}
		})
	}
}
