package projection

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/routing"
)

// routeFold returns a fold that matches routing again, and a maker of
// its events at at, each at the next position.
func routeFold(at time.Time) (*Folded, func(stream string, version int, p journal.Payload) journal.Event) {
	f := newFolded()
	f.routes = &routeLedger{}
	position := int64(0)
	return f, func(stream string, version int, p journal.Payload) journal.Event {
		position++
		return journal.Event{Position: position, Stream: stream, Version: version, RecordedAt: at, Actor: "operator:admin", Payload: p}
	}
}

// TestAuditMatchesRoutingAgain: a dispatch whose recorded routing is not
// what the routes of its config version decide is a violation; one that
// is, or that names the routes of an older version it was decided on, is
// not.
func TestAuditMatchesRoutingAgain(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	invoices := lifecycle.Route{ID: uuid.New(), Source: "erp", From: "*", To: "*", Target: "billing", Types: []string{"invoice.*"}}
	all := lifecycle.Route{ID: uuid.New(), Source: "erp", From: "*", To: "*", Target: "archive", Filter: "message.size > 3"}
	f, event := routeFold(at)
	for i, p := range []journal.Payload{&journal.RouteCreated{Route: invoices}, &journal.RouteCreated{Route: all}} {
		if err := f.fold(event(journal.ConfigStream, i+1, p)); err != nil {
			t.Fatal(err)
		}
	}
	matched := func(routes ...lifecycle.Route) []journal.MatchedRoute {
		var out []journal.MatchedRoute
		for _, r := range routes {
			out = append(out, journal.MatchedRoute{ID: r.ID, Target: r.Target, Types: r.Types, Filter: r.Filter})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		typ      string
		size     int64
		recorded journal.Routing
		wrong    bool
	}{
		{"both", "invoice.paid", 5, journal.Routing{Routes: matched(invoices, all), ConfigVersion: 2}, false},
		{"in another order", "invoice.paid", 5, journal.Routing{Routes: matched(all, invoices), ConfigVersion: 2}, false},
		{"on the older version", "invoice.paid", 5, journal.Routing{Routes: matched(invoices), ConfigVersion: 1}, false},
		{"filter left out", "order.created", 2, journal.Routing{ConfigVersion: 2}, false},
		{"a route too many", "order.created", 2, journal.Routing{Routes: matched(all), ConfigVersion: 2}, true},
		{"a route missing", "invoice.paid", 2, journal.Routing{ConfigVersion: 2}, true},
		{"before routing was recorded", "invoice.paid", 2, journal.Routing{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Violations)
			id := uuid.New()
			accepted := &journal.MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", Type: tc.typ,
				PayloadSize: tc.size, PayloadSHA256: strings.Repeat("0", 64)}
			dispatched := &journal.MessageDispatched{NewDeliveries: journal.NewDeliveries{Routing: tc.recorded}}
			for i, p := range []journal.Payload{accepted, dispatched} {
				if err := f.fold(event(journal.MessageStream(id), i+1, p)); err != nil {
					t.Fatal(err)
				}
			}
			found := f.Violations[before:]
			if tc.wrong != (len(found) == 1) || len(found) > 1 || tc.wrong && !strings.Contains(found[0].Problem, "the routes of config version 2 route it") {
				t.Errorf("violations %v", found)
			}
		})
	}
}

// TestAuditMatchesUnderTheBoundOfItsTime: a decision is matched again
// under the bound on its filters' cost that it records, the meter's of
// before it priced calls by size included; one that records none, of
// before the meter, under cel-go's tracker, which let finish a filter the
// meter stops.
func TestAuditMatchesUnderTheBoundOfItsTime(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	near := lifecycle.Route{ID: uuid.New(), Source: "erp", From: "*", To: "*", Target: "billing",
		Filter: "message.type.split('').all(a, message.type.split('').filter(b, b == a).size() >= 0)"}
	f, event := routeFold(at)
	if err := f.fold(event(journal.ConfigStream, 1, &journal.RouteCreated{Route: near})); err != nil {
		t.Fatal(err)
	}
	matched := []journal.MatchedRoute{{ID: near.ID, Target: near.Target, Filter: near.Filter}}
	stopped := []journal.FilterError{{Route: near.ID, Error: "operation cancelled: actual cost limit exceeded"}}
	for _, tc := range []struct {
		name     string
		recorded journal.Routing
		wrong    string
	}{
		{"stopped by the meter", journal.Routing{FilterErrors: stopped, ConfigVersion: 1, CostLimit: routing.CostBound}, ""},
		{"matched under cel-go's tracker", journal.Routing{Routes: matched, ConfigVersion: 1}, ""},
		{"matched under the meter", journal.Routing{Routes: matched, ConfigVersion: 1, CostLimit: routing.CostBound}, "route it"},
		{"stopped by the meter of before it priced calls by size", journal.Routing{FilterErrors: stopped, ConfigVersion: 1, CostLimit: "meter 100000"}, ""},
		{"stopped by cel-go's tracker", journal.Routing{FilterErrors: stopped, ConfigVersion: 1}, "route it"},
		{"under an unknown bound", journal.Routing{Routes: matched, ConfigVersion: 1, CostLimit: "meter 5"}, `unknown bound on the cost of filters: "meter 5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Violations)
			id := uuid.New()
			accepted := &journal.MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", Type: strings.Repeat("a", 75),
				PayloadSize: 2, PayloadSHA256: strings.Repeat("0", 64)}
			dispatched := &journal.MessageDispatched{NewDeliveries: journal.NewDeliveries{Routing: tc.recorded}}
			for i, p := range []journal.Payload{accepted, dispatched} {
				if err := f.fold(event(journal.MessageStream(id), i+1, p)); err != nil {
					t.Fatal(err)
				}
			}
			found := f.Violations[before:]
			if (tc.wrong != "") != (len(found) == 1) || len(found) > 1 || tc.wrong != "" && !strings.Contains(found[0].Problem, tc.wrong) {
				t.Errorf("violations %v", found)
			}
		})
	}
}

// TestSameRoutingCutsFilterErrors: a filter's error the journal holds
// whole is the one routing now cuts; another error is not.
func TestSameRoutingCutsFilterErrors(t *testing.T) {
	route := uuid.New()
	failed := func(text string) journal.Routing {
		return journal.Routing{FilterErrors: []journal.FilterError{{Route: route, Error: text}}, ConfigVersion: 1}
	}
	whole := `invalid RFC 3339 timestamp "` + strings.Repeat("9", 4096) + `"`
	now := failed(lifecycle.Cut(whole, lifecycle.MaxErrorTextLength))
	if !sameRouting(failed(whole), now) {
		t.Error("the whole error differs from its cut")
	}
	if sameRouting(failed(`invalid RFC 3339 timestamp "8"`), now) {
		t.Error("another error is the same")
	}
}
