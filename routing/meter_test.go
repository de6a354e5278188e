package routing

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/waybill/waybill/lifecycle"
)

// TestMeterPrices: the meter prices as cel-go's tracker does, but for a
// conditional, which costs it 1 (so a step of filter, map or exists_one
// 1 more), a presence test, which costs it 1 whatever it tests, and the
// calls it prices by the sizes of the values they are given, where cel-go
// prices a call on a dyn value at 1 (a string's size, a join, an
// equality of lists, a format); under legacyBound it prices as it did
// before it priced calls by size.
func TestMeterPrices(t *testing.T) {
	payload := []byte(`{"amount": 1500, "id": "in-7", "tags": ["a", "b"], "nums": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
		"note": "` + strings.Repeat("ab ", 27) + `"}`)
	for _, tc := range []struct {
		src                string
		meter, legacy, cel uint64
	}{
		{"message.payload.amount > 1000", 4, 4, 4},
		{`message.headers[?"x-region"].orValue("") == "eu"`, 4, 4, 4},
		{"'x-region' in message.headers && message.headers['x-region'] == 'eu'", 7, 7, 7},
		{"message.payload.nums.all(a, a >= 0)", 54, 54, 54},
		{"message.payload.nums.all(a, message.payload.nums.all(b, a + b >= 0))", 774, 774, 774},
		{"message.payload.tags.exists(t, t in ['b', 'z'])", 38, 38, 38},
		{"{'a': message.payload.id, 'b': [1, 2, 3]}.size() == 2", 45, 45, 45},
		{"message.type.lowerAscii().split('.').size() == 1", 34, 34, 34},
		{"message.payload.id.matches('^in-[0-9]+$') && message.payload.id.contains('7')", 10, 10, 10},
		{"message.payload.note.replace(' ', '--') != ''", 121, 121, 121},
		{"message.payload.nums.filter(a, a > 5).size() > 2", 111, 111, 101},
		{"has(message.payload.amount)", 1, 1, 3},
		{"size(message.payload.note) > 0", 13, 5, 5},
		{"message.payload.note + message.payload.note != ''", 23, 7, 7},
		{"message.payload.nums == message.payload.nums", 17, 7, 7},
		{"message.payload.note in message.payload.tags", 8, 7, 7},
		{"message.payload.tags.join(message.payload.note) != ''", 91, 91, 91},
		{"'%s'.format([message.payload.nums]) != ''", 136, 14, 14},
	} {
		p, err := CompileFilter(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		in := NewInput(Message{Type: "invoice.paid", Headers: map[string]string{"x-region": "eu"}, ContentType: "application/json", Payload: payload})
		if _, err := p.Eval(in); err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		meter := in.meter.cost
		if _, err := p.evalUnder(in, legacyBound); err != nil {
			t.Fatalf("%s under %s: %v", tc.src, legacyBound, err)
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
		if meter != tc.meter || in.meter.cost != tc.legacy || *details.ActualCost() != tc.cel {
			t.Errorf("%s: the meter %d, under %s %d, cel-go %d; want %d, %d and %d", tc.src, meter, legacyBound, in.meter.cost,
				*details.ActualCost(), tc.meter, tc.legacy, tc.cel)
		}
	}
}

// TestMatchUnder: a decision records the bound its filters ran under, and
// is matched again under it; a filter the meter stops, priced a little
// more by it than by cel-go's tracker, which let it finish, matches under
// the bound of before it; one the meter stops since it prices calls by
// size matches under the meter of before. A decision that ran no filter
// records none.
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

	// A filter that reads a string whole at every step, which the meter of
	// before priced at 1 a step, is stopped now, and matches under its
	// bound.
	sized, err := NewTable([]lifecycle.Route{route("sized", nil, "message.payload.items.all(i, size(message.payload.t) > 0)")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m = Message{Source: "shop", From: "a", To: "b", ContentType: "application/json",
		Payload: []byte(`{"t": "` + strings.Repeat("t", 20_000) + `", "items": [` + strings.Repeat("1, ", 99) + `1]}`)}
	if d := sized.Match(m); len(d.Targets) != 0 || len(d.FilterErrors) != 1 || !strings.Contains(d.FilterErrors[0].Error, "cost limit") {
		t.Fatalf("decision %+v; want sized's filter stopped", d)
	}
	if d, err := sized.MatchUnder(m, legacyBound); err != nil || !slices.Equal(d.Targets, []string{"sized"}) || d.CostLimit != legacyBound {
		t.Fatalf("under %s: %+v, %v; want sized", legacyBound, d, err)
	}
}

// TestPricesBySize: a call that reads, compares or makes more than the
// cost limit allows is stopped before it runs, whatever the types its
// arguments were checked as (a payload's values are dyn), so what it would
// have made is never allocated; one within the limit runs, however large
// the payload.
func TestPricesBySize(t *testing.T) {
	big, mid := strings.Repeat("x", 1<<20), strings.Repeat("y", 20_000)
	items := "[" + strings.Repeat(`{"sku": "A-1"},`, 1_499) + `{"sku": "A-2"}]`
	payload := []byte(`{"s": "` + big + `", "t": "` + mid + `", "items": ` + items + `}`)
	// doubled is a list that holds t 2^30 times, in a few bytes of memory.
	doubled := "[message.payload.t]" + strings.Repeat(".map(a, [a, a])", 30)
	for _, tc := range []struct {
		filter  string
		stopped bool
	}{
		{"message.payload.items.all(i, size(message.payload.s) > 0)", true},
		{"message.payload.items.map(i, message.payload.t).join(',') != ''", true},
		{"'%s'.format([message.payload.items.map(i, message.payload.t)]) != ''", true},
		{"message.payload.s.replace('x', 'yy') != ''", true},
		{"message.payload.s.split('').size() > 0", true},
		{"message.payload.s + message.payload.s != ''", true},
		{"message.payload.s.lowerAscii() != ''", true},
		{"bytes(message.payload.s) != b''", true},
		{doubled + ".exists(y, y == y)", true},
		{doubled + ".exists(y, y in [y])", true},
		{"message.payload.s.startsWith('x') && message.payload.s.endsWith('x')", false},
		{"size(message.payload.t) == 20000 && message.payload.t == message.payload.t", false},
		{"message.payload.t.replace('y', 'z').size() == 20000", false},
		{"message.payload.items.map(i, message.payload.t).size() == 1500", false},
		{"message.payload.items.exists(i, i.sku == 'A-2')", false},
	} {
		p, err := CompileFilter(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		in := NewInput(Message{ContentType: "application/json", Payload: payload})
		in.activation(true)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ok, err := p.Eval(in)
		runtime.ReadMemStats(&after)
		if tc.stopped && (err == nil || !strings.Contains(err.Error(), "cost limit")) || !tc.stopped && (err != nil || !ok) {
			t.Errorf("%.80s: %t, %v; want stopped %t", tc.filter, ok, err, tc.stopped)
		}
		if made := after.TotalAlloc - before.TotalAlloc; made > 1<<20 {
			t.Errorf("%.80s: allocated %d bytes", tc.filter, made)
		}
	}
}

// TestTimeLimit: an evaluation whose clock was first read TimeLimit ago is
// stopped at the next reading.
func TestTimeLimit(t *testing.T) {
	p, err := CompileFilter("message.payload.all(a, a >= 0)")
	if err != nil {
		t.Fatal(err)
	}
	list := []byte("[" + strings.Repeat("1,", 2000) + "1]")
	in := NewInput(Message{ContentType: "application/json", Payload: list})
	if _, err := p.Eval(in); err != nil {
		t.Fatal(err)
	}
	in.meter.reset(in.activation(true), false)
	in.meter.start = time.Now().Add(-TimeLimit)
	_, _, err = p.prg.Eval(&in.meter)
	if err == nil || !strings.Contains(err.Error(), "time limit of 1s exceeded") {
		t.Fatalf("an evaluation begun %s ago: %v", TimeLimit, err)
	}
	// The error as a decision records it, cut, is known for the time
	// limit's.
	if !TimeLimited(lifecycle.Cut(err.Error(), lifecycle.MaxErrorTextLength)) || TimeLimited(errCostLimit.Error()) {
		t.Errorf("TimeLimited(%q) is false, or true of the cost limit", err)
	}
}
