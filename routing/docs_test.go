package routing

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// TestDocExamples runs the routes and targets of docs/routing.md's
// examples, as written there, on messages of each kind they tell apart:
// by type, by a payload field, by header, a payload reshaped for its
// receiver, and test traffic cancelled.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/routing.md")
	if err != nil {
		t.Fatal(err)
	}
	var routes []lifecycle.Route
	targets := map[string]lifecycle.Target{}
	for _, block := range strings.Split(string(doc), "```json\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		dec := json.NewDecoder(strings.NewReader(block))
		for {
			var v struct {
				Source, From, To, Target, Filter, Name, Transform string
				Types                                             []string
			}
			if err := dec.Decode(&v); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("a json example of routing.md: %v\n%s", err, block)
			}
			switch {
			case v.Target != "":
				routes = append(routes, lifecycle.Route{ID: uuid.New(), Source: v.Source, From: v.From, To: v.To, Target: v.Target,
					Types: v.Types, Filter: v.Filter})
			case v.Transform != "" && v.Name == "":
				// The target that only cancels test traffic.
				targets["receiver"] = lifecycle.Target{Name: "receiver", Transform: v.Transform}
			case v.Transform != "":
				targets[v.Name] = lifecycle.Target{Name: v.Name, Transform: v.Transform}
			}
		}
	}
	if len(routes) != 5 || len(targets) != 2 {
		t.Fatalf("routing.md's examples: %d routes and %d transforms, want 5 and 2", len(routes), len(targets))
	}
	table, err := NewTable(routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := NewTransforms(targets, nil)
	if err != nil {
		t.Fatal(err)
	}
	const js = "application/json"
	for _, tc := range []struct {
		name    string
		m       Message
		targets []string
	}{
		{"small invoice", Message{Type: "invoice.created", Headers: map[string]string{"x-tenant": "acme"}, ContentType: js,
			Payload: []byte(`{"id": "in-7", "amount": 12.5}`)}, []string{"billing"}},
		{"large invoice from the EU", Message{Type: "invoice.paid", Headers: map[string]string{"x-region": "eu"}, ContentType: js,
			Payload: []byte(`{"id": "in-8", "amount": 5000}`)}, []string{"billing", "eu-receiver", "review"}},
		{"test order", Message{Type: "order.created", Headers: map[string]string{"x-test": "1"}, ContentType: js,
			Payload: []byte(`{}`)}, []string{"fulfilment"}},
		{"test payload", Message{Type: "invoice.paid", ContentType: js, Payload: []byte(`{"test": true, "amount": 5}`)}, []string{"billing"}},
		{"untyped test text", Message{Headers: map[string]string{"x-test": "1"}, ContentType: "text/plain", Payload: []byte("hi")}, nil},
	} {
		tc.m.Source, tc.m.From, tc.m.To, tc.m.Size = "shop", "acme", "globex", int64(len(tc.m.Payload))
		if d := table.Match(tc.m); !slices.Equal(d.Targets, tc.targets) || len(d.FilterErrors) > 0 {
			t.Errorf("%s: targets %v, filter errors %v; want %v and none", tc.name, d.Targets, d.FilterErrors, tc.targets)
		}
	}

	// The reshaped invoice, as the example says it is sent.
	m := Message{Source: "shop", Type: "invoice.created", Headers: map[string]string{"x-tenant": "acme"}, ContentType: js,
		Payload: []byte(`{"id": "in-7", "amount": 12.5}`)}
	s := tf.Shape("billing", m, NewInput(m), maxPayload)
	if s == nil || s.Method != "PUT" || s.Path != "/invoices/in-7" || string(s.Body) != `{"cents":1250,"invoice":"in-7"}` ||
		s.ContentType != js || s.Headers["x-tenant"] != "acme" {
		t.Errorf("reshaped: %+v", s)
	}
	m.Payload = []byte(`{"id": "in-8", "amount": 50}`)
	if s := tf.Shape("billing", m, NewInput(m), maxPayload); s == nil || string(s.Body) != `{"cents":5000,"invoice":"in-8"}` {
		t.Errorf("an amount without a fraction, reshaped: %+v", s)
	}
	if s := tf.Shape("receiver", m, NewInput(m), maxPayload); s != nil {
		t.Errorf("not test traffic, sent as it is: %+v", s)
	}
	m.Headers = map[string]string{"x-test": "1"}
	if s := tf.Shape("receiver", m, NewInput(m), maxPayload); s == nil || s.Cancel != "test traffic" {
		t.Errorf("test traffic: %+v", s)
	}
}
