package projection_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
)

// pick is one of xs, at random.
func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// randomRoute is a route of erp or crm to one of the targets, with types
// and a filter of every kind: on the parties, the type, the headers, the
// size and the payload, some of which fail on some messages.
func randomRoute(rng *rand.Rand, targets []string) lifecycle.Route {
	return lifecycle.Route{Source: pick(rng, "erp", "crm"), From: pick(rng, "*", "acme"), To: pick(rng, "*", "globex"),
		Target: pick(rng, targets...),
		Types:  pick(rng, nil, []string{"*"}, []string{"invoice.*"}, []string{"invoice.created", "order.*"}, []string{"order.created"}),
		Filter: pick(rng, "", "", "message.size > 12", "message.payload.amount > 100",
			"has(message.payload.amount) && message.payload.amount > 100", `message.headers[?"x-tenant"].orValue("") == "acme"`,
			`message.type.startsWith("invoice")`, `message.content_type == "text/plain" && message.payload.contains("7")`,
			`"x-region" in message.headers && message.headers["x-region"] == "eu"`)}
}

// randomMessage is a message of erp or crm of any type, with or without
// headers, and a payload that is JSON with or without an amount, text or
// bytes.
func randomMessage(rng *rand.Rand) commands.NewMessage {
	m := commands.NewMessage{Source: pick(rng, "erp", "crm"), From: pick(rng, "acme", "initech"), To: pick(rng, "globex", "hooli"),
		Type: pick(rng, "", "invoice.created", "invoice.paid", "order.created", "order")}
	if rng.IntN(2) == 0 {
		m.Headers = map[string]string{"X-Tenant": pick(rng, "acme", "globex")}
		if rng.IntN(2) == 0 {
			m.Headers["x-region"] = pick(rng, "eu", "us")
		}
	}
	switch rng.IntN(4) {
	case 0:
		m.ContentType, m.Payload = "application/json", fmt.Appendf(nil, `{"amount": %d}`, rng.IntN(200))
	case 1:
		m.ContentType, m.Payload = "application/json", []byte(`{"note": "no amount"}`)
	case 2:
		m.ContentType, m.Payload = "text/plain", fmt.Appendf(nil, "hello %d", rng.IntN(100))
	default:
		m.ContentType, m.Payload = "application/octet-stream", []byte{0xff, byte(rng.IntN(256))}
	}
	return m
}

// routingInput is what routing sees of a new message, its headers lower
// case as the message keeps them.
func routingInput(t *testing.T, m commands.NewMessage) routing.Message {
	t.Helper()
	headers, err := lifecycle.LowerHeaders("headers", m.Headers)
	if err != nil {
		t.Fatal(err)
	}
	return routing.Message{Source: m.Source, From: m.From, To: m.To, Type: m.Type, Headers: headers,
		ContentType: m.ContentType, Size: int64(len(m.Payload)), Payload: m.Payload}
}

// sameDecision compares two decisions as sets: the targets, the routes
// matched and the filters failed.
func sameDecision(a, b routing.Decision) bool {
	routes := func(d routing.Decision) []journal.MatchedRoute {
		return slices.SortedFunc(slices.Values(d.Routes), func(x, y journal.MatchedRoute) int { return cmp.Compare(x.ID.String(), y.ID.String()) })
	}
	failed := func(d routing.Decision) []journal.FilterError {
		return slices.SortedFunc(slices.Values(d.FilterErrors), func(x, y journal.FilterError) int { return cmp.Compare(x.Route.String(), y.Route.String()) })
	}
	ra, rb := routes(a), routes(b)
	return slices.Equal(a.Targets, b.Targets) && slices.Equal(failed(a), failed(b)) &&
		slices.EqualFunc(ra, rb, func(x, y journal.MatchedRoute) bool {
			return x.ID == y.ID && x.Target == y.Target && slices.Equal(x.Types, y.Types) && x.Filter == y.Filter
		})
}

// TestRoutingIsAFunctionOfMessageAndRoutes: over random route sets and
// random messages, the decision depends on nothing but the message and the
// routes: a second match, a table compiled afresh, one that reuses another
// table's programs and one of the routes in another order decide alike.
// Through the real ingest, the decision each dispatch records is the one
// the routes of its config version make, and the audit, of the whole
// journal and of a message alone, matches every one again without a
// violation.
func TestRoutingIsAFunctionOfMessageAndRoutes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(36, 1))
	targets := []string{"alpha", "beta", "gamma"}
	for range 200 {
		routes := make([]lifecycle.Route, rng.IntN(12))
		for i := range routes {
			routes[i] = randomRoute(rng, targets)
			routes[i].ID = uuid.New()
		}
		table, err := routing.NewTable(routes, nil)
		if err != nil {
			t.Fatal(err)
		}
		shuffled := slices.Clone(routes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		reordered, err := routing.NewTable(shuffled, table)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := routing.NewTable(routes, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			m := routingInput(t, randomMessage(rng))
			d := table.Match(m)
			for name, again := range map[string]routing.Decision{"again": table.Match(m), "fresh": fresh.Match(m), "reordered": reordered.Match(m)} {
				if !sameDecision(d, again) {
					t.Fatalf("%s: %+v, first %+v, for %+v over %+v", name, again, d, m, routes)
				}
			}
		}
	}

	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "gamma", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	var live []lifecycle.Route
	for round := range 4 {
		// The routes change: some made, one changed, one deleted.
		for range 2 + rng.IntN(3) {
			r, err := b.w.CreateRoute(b.ctx, randomRoute(rng, targets), "operator:admin")
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, r)
		}
		i := rng.IntN(len(live))
		changed := randomRoute(rng, targets)
		changed.ID = live[i].ID
		if err := b.w.UpdateRoute(b.ctx, changed, "operator:admin"); err != nil {
			t.Fatal(err)
		}
		live[i] = changed
		if round > 0 {
			i := rng.IntN(len(live))
			if err := b.w.DeleteRoute(b.ctx, live[i].ID, "operator:admin"); err != nil {
				t.Fatal(err)
			}
			live = slices.Delete(live, i, i+1)
		}
		// The setup's routes of erp to alpha and beta are live too: the
		// table is the routes the Writer reads.
		all, err := b.w.Routes(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		table, err := routing.NewTable(all, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 8 {
			in := randomMessage(rng)
			m, _, err := b.w.Ingest(b.ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
			if err != nil {
				t.Fatal(err)
			}
			dispatched, ok := events[len(events)-1].Payload.(*journal.MessageDispatched)
			if !ok {
				t.Fatalf("the message's last event is %s", events[len(events)-1].Kind())
			}
			want := table.Match(routingInput(t, in))
			var got []string
			for _, d := range m.Deliveries {
				got = append(got, d.Target)
			}
			slices.Sort(got)
			if !sameDecision(routing.Decision{Targets: got, Routing: dispatched.Routing}, want) {
				t.Fatalf("round %d: recorded %v %+v, the routes decide %+v, for %+v", round, got, dispatched.Routing, want, in)
			}
			if round == 3 {
				r, err := projection.Audit(b.ctx, b.db, m.ID)
				if err != nil || len(r.Violations) != 0 {
					t.Fatalf("audit of %s: %v %v", m.ID, err, r)
				}
			}
		}
	}
	if r := b.audit(t); len(r.Violations) != 0 {
		t.Fatalf("violations %v", r.Violations)
	}
}
