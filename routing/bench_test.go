package routing

import (
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
		if s := tf.Shape("billing", m, NewInput(m)); s == nil || s.Error != "" {
			b.Fatal(s)
		}
	}
}
