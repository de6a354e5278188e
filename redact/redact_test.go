package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/redact"
)

func TestTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ config, want string }{
		{`{"url":"https://u:s3cret@r.example/in","method":"POST","headers":{"Authorization":"Bearer t0ken","X-Api-Key":"k3y"}}`,
			`{"url":"https://u:***@r.example/in","method":"POST","headers":{"Authorization":"***","X-Api-Key":"***"}}`},
		{`{"url":"https://r.example/in","method":"POST"}`, `{"url":"https://r.example/in","method":"POST"}`},
		{`{"dir":"/srv/out","extension":"bin"}`, `{"dir":"/srv/out","extension":"bin"}`},
		{`{"headers":{}}`, `{"headers":{}}`},
		{`{}`, `{}`},
		{`null`, `null`},
	} {
		target := lifecycle.Target{Name: "erp", Kind: "http", Config: json.RawMessage(tc.config)}
		if got := redact.Target(target); string(got.Config) != tc.want || got.Name != "erp" {
			t.Errorf("redact.Target(%s) = %s %s, want %s", tc.config, got.Name, got.Config, tc.want)
		}
		if string(target.Config) != tc.config {
			t.Errorf("redact.Target changed its argument's configuration to %s", target.Config)
		}
	}
}

func TestSourceConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config, want string
		masked       bool
	}{
		{`{"database_url":"postgres://u:s3cret@db/x","table":"inbox"}`, `{"database_url":"postgres://u:***@db/x","table":"inbox"}`, true},
		{`{"database_url":"host=db sslpassword=k3y","table":"inbox"}`, `{"database_url":"host=db sslpassword=***","table":"inbox"}`, true},
		{`{"database_url":"postgres://u@db/x"}`, `{"database_url":"postgres://u@db/x"}`, false},
		{`{"dir":"/srv/in"}`, `{"dir":"/srv/in"}`, false},
		{`[1]`, `[1]`, false},
		{`{"verify":{"scheme":"github","secrets":["s3cret","s4cret"]},"from":"gh"}`,
			`{"verify":{"scheme":"github","secrets":["***","***"]},"from":"gh"}`, true},
		{`{"verify":{"scheme":"stripe","secret":"whsec_s3cret"}}`, `{"verify":{"scheme":"stripe","secret":"***"}}`, true},
		{`{"verify":{"scheme":"hmac","secrets":"s3cret"}}`, `{"verify":{"scheme":"hmac","secrets":"***"}}`, true},
		{`{"verify":{"scheme":"hmac"}}`, `{"verify":{"scheme":"hmac"}}`, false},
	} {
		got, masked := redact.SourceConfig(json.RawMessage(tc.config))
		if string(got) != tc.want || masked != tc.masked {
			t.Errorf("redact.SourceConfig(%s) = %s, %t; want %s, %t", tc.config, got, masked, tc.want, tc.masked)
		}
	}
}

func TestPayload(t *testing.T) {
	t.Parallel()
	target := lifecycle.Target{Name: "erp", Kind: "http", Config: json.RawMessage(`{"headers":{"Authorization":"Bearer t0ken"}}`)}
	source := lifecycle.Source{Name: "up", Kind: "inbox_table", Config: json.RawMessage(`{"database_url":"postgres://u:s3cret@db/x"}`)}
	accepted := &journal.MessageAccepted{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Baggage: "session=s3cret"}
	shaped := journal.NewDeliveries{Deliveries: []journal.NewDelivery{
		{ID: uuid.New(), Seq: 1, Target: "erp", Shape: &journal.Shape{Path: "/in", Headers: map[string]string{"authorization": "Bearer t0ken"}}},
		{ID: uuid.New(), Seq: 2, Target: "crm"}}}
	for _, tc := range []struct {
		p    journal.Payload
		want string
	}{
		{&journal.TargetCreated{Target: target}, `"config":{"headers":{"Authorization":"***"}}`},
		{&journal.TargetUpdated{Target: target}, `"config":{"headers":{"Authorization":"***"}}`},
		{&journal.SourceCreated{Source: source}, `"config":{"database_url":"postgres://u:***@db/x"}`},
		{&journal.SourceUpdated{Source: source}, `"config":{"database_url":"postgres://u:***@db/x"}`},
		{&journal.TargetDeleted{Name: "erp"}, `{"name":"erp"}`},
		{accepted, `"baggage":"***"`},
		{&journal.MessageDispatched{NewDeliveries: shaped}, `"shape":{"path":"/in","headers":{"authorization":"***"}}`},
		{&journal.MessageRedispatched{NewDeliveries: shaped}, `"headers":{"authorization":"***"}`},
		{&journal.MessageResent{Generation: 2, NewDeliveries: shaped}, `"headers":{"authorization":"***"}`},
		{&journal.MessageAccepted{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`},
	} {
		got, err := json.Marshal(redact.Payload(tc.p))
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(got) || !strings.Contains(string(got), tc.want) || strings.Contains(string(got), "t0ken") || strings.Contains(string(got), "s3cret") {
			t.Errorf("redact.Payload(%s) = %s, want it to hold %s", tc.p.Kind(), got, tc.want)
		}
	}
	if string(target.Config) != `{"headers":{"Authorization":"Bearer t0ken"}}` || string(source.Config) != `{"database_url":"postgres://u:s3cret@db/x"}` ||
		accepted.Baggage != "session=s3cret" || shaped.Deliveries[0].Shape.Headers["authorization"] != "Bearer t0ken" {
		t.Errorf("redact.Payload changed the event it was given")
	}
}

func TestHides(t *testing.T) {
	t.Parallel()
	for _, role := range auth.Roles {
		if got, want := redact.Hides(role), role != auth.RoleAdmin; got != want {
			t.Errorf("redact.Hides(%s) = %t, want %t", role, got, want)
		}
	}
}
