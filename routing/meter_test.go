package routing

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"

	"github.com/waybill/waybill/lifecycle"
)

// TestMeterPrices: the meter prices as cel-go's tracker does, but for a
// conditional, which costs it 1 (so a step of filter, map or exists_one
// 1 more), and a presence test, which costs it 1 whatever it tests.
func TestMeterPrices(t *testing.T) {
	payload := []byte(`{"amount": 1500, "id": "in-7", "tags": ["a", "b"], "nums": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}`)
	for _, tc := range []struct {
		src        string
		meter, cel uint64
	}{
		{"message.payload.amount > 1000", 4, 4},
		{`message.headers[?"x-region"].orValue("") == "eu"`, 4, 4},
		{"'x-region' in message.headers && message.headers['x-region'] == 'eu'", 7, 7},
		{"message.payload.nums.all(a, a >= 0)", 54, 54},
		{"message.payload.nums.all(a, message.payload.nums.all(b, a + b >= 0))", 774, 774},
		{"message.payload.tags.exists(t, t in ['b', 'z'])", 38, 38},
		{"{'a': message.payload.id, 'b': [1, 2, 3]}.size() == 2", 45, 45},
		{"message.type.lowerAscii().split('.').size() == 1", 34, 34},
		{"message.payload.id.matches('^in-[0-9]+$') && message.payload.id.contains('7')", 10, 10},
		{"message.payload.nums.filter(a, a > 5).size() > 2", 111, 101},
		{"has(message.payload.amount)", 1, 3},
	} {
		p, err := CompileFilter(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		in := NewInput(Message{Type: "invoice.paid", Headers: map[string]string{"x-region": "eu"}, ContentType: "application/json", Payload: payload})
		if _, err := p.Eval(in); err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		checked, _ := env.Compile(tc.src)
		tracked, err := env.Program(checked, cel.CostTracking(nil))
		if err != nil {
			t.Fatal(err)
		}
		_, details, err := tracked.Eval(in.activation(true))
		if err != nil {
			t.Fatal(err)
		}
		if in.meter.cost != tc.meter || *details.ActualCost() != tc.cel {
			t.Errorf("%s: the meter %d, cel-go %d; want %d and %d", tc.src, in.meter.cost, *details.ActualCost(), tc.meter, tc.cel)
		}
	}
}

// TestMatchUnder: a decision records the bound its filters ran under, and
// is matched again under it; a filter the meter stops, priced a little
// more by it than by cel-go's tracker, which let it finish, matches under
// the bound of before it. A decision that ran no filter records none.
func TestMatchUnder(t *testing.T) {
	near := route("near", nil, "message.type.split('').all(a, message.type.split('').filter(b, b == a).size() >= 0)")
	table, err := NewTable([]lifecycle.Route{near, route("plain", nil, "")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := Message{Source: "shop", From: "a", To: "b", Type: strings.Repeat("a", 75)}
	now := table.Match(m)
	if now.CostLimit != CostBound || !slices.Equal(now.Targets, []string{"plain"}) || len(now.FilterErrors) != 1 ||
		!strings.Contains(now.FilterErrors[0].Error, "cost limit") {
		t.Fatalf("decision %+v; want plain only, near's filter stopped, under %q", now, CostBound)
	}
	before, err := table.MatchUnder(m, "")
	if err != nil || !slices.Equal(before.Targets, []string{"near", "plain"}) || len(before.FilterErrors) != 0 || before.CostLimit != "" {
		t.Fatalf("under cel-go's tracker: %+v, %v; want near and plain", before, err)
	}
	if _, err := table.MatchUnder(m, "meter 5"); !errors.Is(err, ErrUnknownBound) {
		t.Fatalf("an unknown bound: %v", err)
	}
	m.Source = "crm"
	if d := table.Match(m); d.CostLimit != "" {
		t.Fatalf("no filter ran, but the decision records %q", d.CostLimit)
	}
}
