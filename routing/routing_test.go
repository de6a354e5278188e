package routing

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

func route(target string, types []string, filter string) lifecycle.Route {
	return lifecycle.Route{ID: uuid.New(), Source: "shop", From: "*", To: "*", Target: target, Types: types, Filter: filter}
}

// TestMatchTypesAndFilters is the types × filter matrix against the
// fan-out expected of each message.
func TestMatchTypesAndFilters(t *testing.T) {
	routes := []lifecycle.Route{
		route("all", nil, ""),
		route("invoices", []string{"invoice.*"}, ""),
		route("created", []string{"invoice.created", "order.created"}, ""),
		route("billing", []string{"invoice.*"}, "message.payload.amount > 1000"),
		route("eu", nil, `"x-region" in message.headers && message.headers["x-region"] == "eu"`),
		route("text", nil, `message.payload.startsWith("hello")`),
		route("untyped", []string{"*"}, `message.type == ""`),
		route("big", nil, "message.size > 10"),
		route("tenant", nil, `message.headers[?"x-tenant"].orValue("") == "acme" || message.payload.?tenant.orValue("") == "acme"`),
		route("other-source", nil, "true"),
	}
	routes[len(routes)-1].Source = "crm"
	table, err := NewTable(routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	json := "application/json"
	for _, tc := range []struct {
		name    string
		m       Message
		targets []string
		failed  int
	}{
		{"untyped text", Message{Type: "", ContentType: "text/plain", Payload: []byte("hello")},
			[]string{"all", "text", "untyped"}, 0},
		{"small invoice", Message{Type: "invoice.created", ContentType: json, Payload: []byte(`{"amount":10}`)},
			[]string{"all", "big", "created", "invoices"}, 1}, // text: startsWith on a map fails
		{"large invoice", Message{Type: "invoice.paid", ContentType: json, Payload: []byte(`{"amount":1000.5}`)},
			[]string{"all", "big", "billing", "invoices"}, 1},
		{"invoice without amount", Message{Type: "invoice.paid", ContentType: json, Payload: []byte(`{}`)},
			[]string{"all", "invoices"}, 2}, // billing: no such key; text
		{"order from eu", Message{Type: "order.created", Headers: map[string]string{"x-region": "eu", "x-tenant": "acme"}, ContentType: "application/octet-stream", Payload: []byte{0xff}},
			[]string{"all", "created", "eu", "tenant"}, 1}, // text: payload is null
		{"tenant in the payload", Message{Type: "order.paid", ContentType: json, Payload: []byte(`{"tenant":"acme"}`)},
			[]string{"all", "big", "tenant"}, 1}, // text
		{"json that does not parse is text", Message{Type: "x", ContentType: "application/problem+json; charset=utf-8", Payload: []byte("hello, world")},
			[]string{"all", "big", "text"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.Source, tc.m.From, tc.m.To = "shop", "a", "b"
			tc.m.Size = int64(len(tc.m.Payload))
			d := table.Match(tc.m)
			if !slices.Equal(d.Targets, tc.targets) || len(d.FilterErrors) != tc.failed {
				t.Fatalf("targets %v, %d failed (%v); want %v, %d failed", d.Targets, len(d.FilterErrors), d.FilterErrors, tc.targets, tc.failed)
			}
			if again := table.Match(tc.m); !slices.Equal(again.Targets, d.Targets) || len(again.Routes) != len(d.Routes) {
				t.Fatalf("a second decision differs: %v, then %v", d, again)
			}
			if tracked, err := table.MatchUnder(tc.m, ""); err != nil || !slices.Equal(tracked.Targets, d.Targets) ||
				!slices.Equal(tracked.FilterErrors, d.FilterErrors) {
				t.Fatalf("under cel-go's tracker %v, %v; under the meter %v", tracked, err, d)
			}
		})
	}
}

func TestCompileFilterRefuses(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{"message.type ==", "at 1:16:"},
		{`"text"`, "must yield a bool, yields a string"},
		{"message.typ == 'x'", `at 1:8: message has no field "typ"`},
		{"nosuch > 1", "undeclared reference to 'nosuch'"},
		{"message.size +", "at 1:15"},
	} {
		_, err := CompileFilter(tc.src)
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != "filter" || !strings.Contains(fe.Problem, tc.want) {
			t.Errorf("CompileFilter(%q) = %v; want a problem of filter with %q", tc.src, err, tc.want)
		}
	}
	if _, err := CompileFilter("message.size"); err != nil {
		// A dyn may well be a bool; Eval checks it.
		t.Errorf("a dyn result is refused: %v", err)
	}
}

// TestCostLimit: a filter that would run too long is stopped and reported
// as its route's failure, and the other routes still match.
func TestCostLimit(t *testing.T) {
	slow := route("slow", nil, "message.payload.all(a, message.payload.all(b, a + b >= 0))")
	table, err := NewTable([]lifecycle.Route{slow, route("fast", nil, "message.size > 0")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	list := "[" + strings.Repeat("1,", 2000) + "1]"
	d := table.Match(Message{Source: "shop", From: "a", To: "b", ContentType: "application/json", Payload: []byte(list), Size: int64(len(list))})
	if !slices.Equal(d.Targets, []string{"fast"}) || len(d.FilterErrors) != 1 || d.FilterErrors[0].Route != slow.ID ||
		!strings.Contains(d.FilterErrors[0].Error, "cost limit") {
		t.Fatalf("decision %+v; want fast only, and slow's filter stopped by the cost limit", d)
	}
}

// TestNewTableReusesPrograms: remaking a table compiles only new filters.
func TestNewTableReusesPrograms(t *testing.T) {
	r := route("a", nil, "message.size > 1")
	first, err := NewTable([]lifecycle.Route{r}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewTable([]lifecycle.Route{r, route("b", nil, "message.size > 2")}, first)
	if err != nil {
		t.Fatal(err)
	}
	if second.programs[0] != first.programs[0] || second.programs[1] == nil {
		t.Fatal("the unchanged filter was compiled again, or the new one not at all")
	}
}

// TestCancelTestTraffic is docs/routing.md's example: test traffic, by
// header or payload field, matches nothing; anything else, text included,
// matches without a failure.
func TestCancelTestTraffic(t *testing.T) {
	table, err := NewTable([]lifecycle.Route{route("billing", nil, `!('x-test' in message.headers) && message.payload.?test.orValue(false) != true`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m       Message
		matches bool
	}{
		{Message{Headers: map[string]string{"x-test": "1"}, ContentType: "text/plain", Payload: []byte("hi")}, false},
		{Message{ContentType: "application/json", Payload: []byte(`{"test": true}`)}, false},
		{Message{ContentType: "application/json", Payload: []byte(`{"test": false}`)}, true},
		{Message{ContentType: "application/json", Payload: []byte(`{}`)}, true},
		{Message{ContentType: "text/plain", Payload: []byte("hi")}, true},
	} {
		tc.m.Source, tc.m.From, tc.m.To = "shop", "a", "b"
		d := table.Match(tc.m)
		if (len(d.Targets) == 1) != tc.matches || len(d.FilterErrors) != 0 {
			t.Errorf("%s: %+v, want matched %t and no failure", tc.m.Payload, d, tc.matches)
		}
	}
}

// TestMatchTypeFilterMatrix is every kind of types against every kind of
// filter, for messages of each kind of type: a route matches when its types
// take the message's type and its filter yields true; a filter that fails
// is recorded only where the types took the message.
func TestMatchTypeFilterMatrix(t *testing.T) {
	typeRows := []struct {
		name  string
		types []string
		// takes are the message types the row takes.
		takes []string
	}{
		{"any", nil, []string{"", "invoice", "invoice.created", "invoice.paid", "invoicex.created", "order.created"}},
		{"star", []string{"*"}, []string{"", "invoice", "invoice.created", "invoice.paid", "invoicex.created", "order.created"}},
		{"exact", []string{"invoice.created"}, []string{"invoice.created"}},
		{"prefix", []string{"invoice.*"}, []string{"invoice.created", "invoice.paid"}},
		{"list", []string{"invoice.created", "order.*"}, []string{"invoice.created", "order.created"}},
	}
	filterRows := []struct {
		name, filter string
		// yields is the filter's result on a message of the type; fails,
		// that it fails on every message.
		yields func(typ string) bool
		fails  bool
	}{
		{"none", "", func(string) bool { return true }, false},
		{"true", "message.size >= 0", func(string) bool { return true }, false},
		{"false", "message.size < 0", func(string) bool { return false }, false},
		{"on type", `message.type.endsWith(".created")`, func(typ string) bool { return strings.HasSuffix(typ, ".created") }, false},
		{"fails", "message.payload.amount > 1", nil, true},
	}
	var routes []lifecycle.Route
	for _, tr := range typeRows {
		for _, fr := range filterRows {
			routes = append(routes, route(tr.name+"/"+fr.name, tr.types, fr.filter))
		}
	}
	table, err := NewTable(routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"", "invoice", "invoice.created", "invoice.paid", "invoicex.created", "order.created"} {
		var targets, failed []string
		for _, tr := range typeRows {
			if !slices.Contains(tr.takes, typ) {
				continue
			}
			for _, fr := range filterRows {
				switch {
				case fr.fails:
					failed = append(failed, tr.name+"/"+fr.name)
				case fr.yields(typ):
					targets = append(targets, tr.name+"/"+fr.name)
				}
			}
		}
		slices.Sort(targets)
		d := table.Match(Message{Source: "shop", From: "a", To: "b", Type: typ, ContentType: "application/json", Payload: []byte(`{}`), Size: 2})
		var gotFailed []string
		for _, e := range d.FilterErrors {
			i := slices.IndexFunc(routes, func(r lifecycle.Route) bool { return r.ID == e.Route })
			gotFailed = append(gotFailed, routes[i].Target)
			if !strings.Contains(e.Error, "no such key: amount") {
				t.Errorf("type %q: %s failed with %q", typ, routes[i].Target, e.Error)
			}
		}
		if !slices.Equal(d.Targets, targets) || !slices.Equal(gotFailed, failed) || len(d.Routes) != len(targets) {
			t.Errorf("type %q: targets %v, failed %v; want %v, failed %v", typ, d.Targets, gotFailed, targets, failed)
		}
	}
}

// TestFilterErrorIsCut: a filter's error that quotes a payload's value of
// 50 KB is cut in the decision (a value of megabytes is not even parsed:
// its price passes the cost limit).
func TestFilterErrorIsCut(t *testing.T) {
	table, err := NewTable([]lifecycle.Route{route("amount", nil, "timestamp(message.payload.amount) > timestamp('2020-01-01T00:00:00Z')")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"amount":"` + strings.Repeat("9x", 25_000) + `"}`
	d := table.Match(Message{Source: "shop", From: "a", To: "b", ContentType: "application/json", Payload: []byte(payload),
		Size: int64(len(payload))})
	if len(d.FilterErrors) != 1 || len(d.FilterErrors[0].Error) > lifecycle.MaxErrorTextLength ||
		!strings.Contains(d.FilterErrors[0].Error, "9x9x") || !strings.HasSuffix(d.FilterErrors[0].Error, lifecycle.CutMark) {
		t.Fatalf("filter error of %d bytes: %.300v", len(d.FilterErrors[0].Error), d.FilterErrors)
	}
}
