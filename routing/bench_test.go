package routing

import (
	"testing"
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
