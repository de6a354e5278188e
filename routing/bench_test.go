package routing

import (
	"fmt"
	"strings"
	"testing"

	"github.com/waybill/waybill/lifecycle"
)

// BenchmarkEval is one filter over a parsed JSON payload.
func BenchmarkEval(b *testing.B) {
	p, err := CompileFilter("message.payload.amount > 100")
	if err != nil {
		b.Fatal(err)
	}
	in := NewInput(Message{Source: "erp", ContentType: "application/json", Payload: []byte(`{"amount": 500, "customer": {"id": 17}}`)})
	for b.Loop() {
		if ok, err := p.Eval(in); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkTransform is a typical transform, a payload reshaped for its
// receiver with a path and a header, on a message whose payload is parsed
// for it: what the making of one delivery costs more.
func BenchmarkTransform(b *testing.B) {
	tf, err := NewTransforms(map[string]lifecycle.Target{"billing": {Transform: `{"payload": {"invoice": message.payload.id,
		"cents": int(message.payload.amount * 100.0), "customer": message.payload.customer.id},
		"path": "/invoices/" + message.payload.id, "headers": {"x-kind": message.type}}`}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	m := Message{Source: "erp", Type: "invoice.paid", ContentType: "application/json",
		Payload: []byte(`{"id": "in-17", "amount": 500.25, "customer": {"id": 17, "name": "ACME"}, "lines": [{"sku": "A-1", "qty": 2}]}`)}
	for b.Loop() {
		if s := tf.Shape("billing", m, NewInput(m), maxPayload); s == nil || s.Error != "" {
			b.Fatal(s)
		}
	}
}

// BenchmarkLoops is a filter that loops over a payload's list: one loop
// over 2,001 numbers, which ends within the cost limit, and two the cost
// limit stops, one loop over 20,001 and two nested over 2,001: what a
// stopped loop costs is the steps the meter lets it take.
func BenchmarkLoops(b *testing.B) {
	for _, c := range []struct {
		name, filter string
		n            int
		stopped      bool
	}{
		{"one loop over 2001", "message.payload.all(a, a >= 0)", 2000, false},
		{"one loop over 20001, stopped", "message.payload.all(a, a >= 0)", 20000, true},
		{"nested loops over 2001, stopped", "message.payload.all(a, message.payload.all(b, a + b >= 0))", 2000, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := CompileFilter(c.filter)
			if err != nil {
				b.Fatal(err)
			}
			list := []byte("[" + strings.Repeat("1,", c.n) + "1]")
			in := NewInput(Message{Source: "erp", ContentType: "application/json", Payload: list, Size: int64(len(list))})
			for b.Loop() {
				if _, err := p.Eval(in); (err != nil) != c.stopped || c.stopped && !strings.Contains(err.Error(), "cost limit") {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPricedCalls is a filter whose calls' work grows with the
// values they are given, under the meter of before (legacyBound), which
// priced them as their overloads resolved when checked (at 1 for a dyn
// value) once they had run, and under the meter (CostBound), which prices
// them by the values and stops them before they run: a string's size read
// at every step of a loop, a list of copies joined or formatted, a list
// of lists compared at every step.
func BenchmarkPricedCalls(b *testing.B) {
	s, t := strings.Repeat("s", 400_000), strings.Repeat("t", 20_000)
	items := "[" + strings.Repeat("1,", 1_499) + "1]"
	nested := "[" + strings.Repeat("["+strings.Repeat("1,", 19)+"1],", 499) + "[1]]"
	payload := []byte(`{"s": "` + s + `", "t": "` + t + `", "items": ` + items + `, "nested": ` + nested + `}`)
	for _, c := range []struct{ name, filter string }{
		{"size in a loop", "message.payload.items.all(i, size(message.payload.s) > 0)"},
		{"join of copies", "message.payload.items.map(i, message.payload.t).join(',') != ''"},
		{"format of copies", "'%s'.format([message.payload.items.map(i, message.payload.t)]) != ''"},
		{"lists compared in a loop", "message.payload.items.all(i, message.payload.nested == message.payload.nested)"},
	} {
		p, err := CompileFilter(c.filter)
		if err != nil {
			b.Fatal(err)
		}
		for _, bound := range []string{legacyBound, CostBound} {
			b.Run(c.name+", "+bound, func(b *testing.B) {
				in := NewInput(Message{ContentType: "application/json", Payload: payload})
				in.activation(true)
				for b.Loop() {
					p.evalUnder(in, bound)
				}
			})
		}
	}
}

// BenchmarkTransformBound is a transform that repeats a large value of the
// payload in each item of a list, as JSON 300 MB: 1,500 items, each with
// a customer of 200 KB. The bound on the payload, 10 MiB, stops its
// writing.
func BenchmarkTransformBound(b *testing.B) {
	tf, err := NewTransforms(map[string]lifecycle.Target{"shop": {Transform: `{"payload": {"lines":
		message.payload.items.map(i, {"sku": i.sku, "customer": message.payload.customer})}}`}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	items := "[" + strings.Repeat(`{"sku": "A-1"},`, 1_499) + `{"sku": "A-2"}]`
	m := Message{Source: "erp", ContentType: "application/json",
		Payload: []byte(`{"customer": "` + strings.Repeat("c", 200_000) + `", "items": ` + items + `}`)}
	for b.Loop() {
		if s := tf.Shape("shop", m, NewInput(m), 10<<20); s == nil || !strings.Contains(s.Error, "more than 10485760 bytes") {
			b.Fatal(s)
		}
	}
}

// BenchmarkParsePayload is the parse of a JSON payload of 1 MB, 10,000
// items of strings, integers and numbers with a fraction, as filters read
// it under the bound of before (encoding/json, every number a double) and
// now (json.Valid, then decodeJSON, every number exact).
func BenchmarkParsePayload(b *testing.B) {
	var items []string
	for i := range 10_000 {
		items = append(items, fmt.Sprintf(`{"sku": "A-%d", "qty": %d, "price": %d.25, "name": "a product's name", "tags": ["a", "b"]}`, i, i, i))
	}
	payload := []byte(`{"items": [` + strings.Join(items, ", ") + `]}`)
	for _, c := range []struct {
		name   string
		legacy bool
	}{{"doubles, " + legacyBound, true}, {"exact, " + CostBound, false}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, ok := parsePayload("application/json", payload, c.legacy).(map[string]any); !ok {
					b.Fatal("not parsed")
				}
			}
		})
	}
}
