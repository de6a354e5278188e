package commands_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
)

// routing draws from small pools, so that routes and messages often meet.
var (
	routeTypes   = [][]string{nil, {"*"}, {"invoice.*"}, {"invoice.paid", "order.*"}}
	routeFilters = []string{"", "message.payload.amount > 100", `message.headers[?"x-region"].orValue("") == "eu"`,
		`message.payload.note.startsWith("test")`, "message.size < 40", `message.type.startsWith("order")`}
	messageTypes = []string{"", "invoice.paid", "invoice.void", "order.created"}
)

// TestRoutingIsAPureFunctionProperty: whatever the routes' types and
// filters and however they change, each dispatch, redispatch and replay
// records the decision the routes of the configuration it names make on
// the message, so the audit, which matches every one again from the
// journal, finds nothing.
func TestRoutingIsAPureFunctionProperty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: sinkConfig}, admin); err != nil {
			t.Fatal(err)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		var messages []uuid.UUID
		actions := map[string]func(*rapid.T){
			"route": func(rt *rapid.T) {
				r := lifecycle.Route{Source: "erp", From: "*", To: "*",
					Target: rapid.SampledFrom([]string{"alpha", "beta", "gamma"}).Draw(rt, "target"),
					Types:  rapid.SampledFrom(routeTypes).Draw(rt, "types"), Filter: rapid.SampledFrom(routeFilters).Draw(rt, "filter")}
				routes, err := b.w.Routes(b.ctx)
				if err != nil {
					rt.Fatal(err)
				}
				if len(routes) > 0 && rapid.Bool().Draw(rt, "change") {
					r.ID = rapid.SampledFrom(routes).Draw(rt, "route").ID
					if rapid.Bool().Draw(rt, "delete") {
						err = b.w.DeleteRoute(b.ctx, r.ID, admin)
					} else {
						err = b.w.UpdateRoute(b.ctx, r, admin)
					}
				} else {
					_, err = b.w.CreateRoute(b.ctx, r, admin)
				}
				if err != nil {
					rt.Fatal(err)
				}
			},
			"ingest": func(rt *rapid.T) {
				in := newMessage()
				in.Type = rapid.SampledFrom(messageTypes).Draw(rt, "type")
				if rapid.Bool().Draw(rt, "eu") {
					in.Headers = map[string]string{"X-Region": "eu"}
				}
				switch rapid.IntRange(0, 2).Draw(rt, "payload") {
				case 0:
					in.ContentType = "application/json"
					in.Payload = fmt.Appendf(nil, `{"amount": %d, "note": "test %d"}`, rapid.IntRange(0, 200).Draw(rt, "amount"), len(messages))
				case 1:
					in.ContentType = "application/json"
					in.Payload = []byte(`{"other": true}`)
				default:
					in.Payload = []byte("plain text")
				}
				m, _, err := b.w.Ingest(b.ctx, in)
				if err != nil {
					rt.Fatal(err)
				}
				messages = append(messages, m.ID)
			},
			"redispatch": func(rt *rapid.T) {
				if len(messages) == 0 {
					rt.Skip("no message")
				}
				_, err := b.w.Redispatch(b.ctx, rapid.SampledFrom(messages).Draw(rt, "message"), commands.Action{Operator: "admin"})
				if err != nil && !errors.Is(err, commands.ErrNotRedispatchable) {
					rt.Fatal(err)
				}
			},
			"replay": func(rt *rapid.T) {
				if len(messages) == 0 {
					rt.Skip("no message")
				}
				_, err := b.w.Replay(b.ctx, rapid.SampledFrom(messages).Draw(rt, "message"), commands.Action{Operator: "admin"})
				if err != nil && !errors.Is(err, commands.ErrNotResendable) {
					rt.Fatal(err)
				}
			},
		}
		for range rapid.IntRange(1, 12).Draw(rt, "steps") {
			name := rapid.SampledFrom([]string{"route", "ingest", "ingest", "redispatch", "replay"}).Draw(rt, "action")
			actions[name](rt)
		}
		report, err := projection.Audit(b.ctx, b.db, uuid.Nil)
		if err != nil {
			rt.Fatal(err)
		}
		if len(report.Violations) > 0 {
			rt.Fatalf("audit: %v", report.Violations)
		}
	})
}

// TestDispatchJournalsItsRouting: the dispatch event names the routes that
// matched and the filters that failed, and says so in the history.
func TestDispatchJournalsItsRouting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true, Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	big, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing",
		Types: []string{"invoice.*"}, Filter: "message.payload.amount > 1000"}, admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing",
		Filter: "message.nope > 1"}, admin); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("a filter that does not check was saved: %v", err)
	}
	dispatched := func(payload string) *journal.MessageDispatched {
		t.Helper()
		in := newMessage()
		in.Type, in.ContentType, in.Payload = "invoice.paid", "application/json", []byte(payload)
		m, _, err := b.w.Ingest(b.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
		if err != nil {
			t.Fatal(err)
		}
		return events[1].Payload.(*journal.MessageDispatched)
	}
	p := dispatched(`{"amount": 1500}`)
	if len(p.Routes) != 1 || p.Routes[0].ID != big.ID || p.ConfigVersion == 0 || len(p.FilterErrors) != 0 {
		t.Fatalf("routing %+v", p.Routing)
	}
	want := "dispatched to billing; routed to billing by route " + big.ID.String() + " (types invoice.*; filter message.payload.amount > 1000)"
	if p.Text() != want {
		t.Errorf("text %q, want %q", p.Text(), want)
	}
	p = dispatched(`{"total": 1500}`)
	if len(p.Routes) != 0 || len(p.FilterErrors) != 1 || p.FilterErrors[0].Route != big.ID ||
		!strings.Contains(p.Text(), "no route matched; routed the filter of route "+big.ID.String()+" failed: no such key: amount") {
		t.Errorf("routing %+v: %q", p.Routing, p.Text())
	}
}

// TestLoopingFilterBesideIngests: a filter that loops past the cost
// limit on one message is stopped and recorded, and the ingests made at
// the same time, in the same batches, commit routed as their routes say.
func TestLoopingFilterBesideIngests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "plain")
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "loop", Kind: "http", Enabled: true, Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	loop, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "loop",
		Filter: "message.payload.all(a, message.payload.all(b, a + b >= 0))"}, admin)
	if err != nil {
		t.Fatal(err)
	}
	looping := newMessage()
	looping.ContentType, looping.Payload = "application/json", []byte("["+strings.Repeat("1,", 2000)+"1]")
	ids := make([]uuid.UUID, 21)
	errs := make(chan error, len(ids))
	for i := range ids {
		go func() {
			in := newMessage()
			if i == 0 {
				in = looping
			}
			m, _, err := b.w.Ingest(b.ctx, in)
			if err == nil {
				ids[i] = m.ID
			}
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(id))
		if err != nil {
			t.Fatal(err)
		}
		p := events[1].Payload.(*journal.MessageDispatched)
		if len(p.Routes) != 1 || p.Routes[0].Target != "plain" || len(p.FilterErrors) != 1 || p.FilterErrors[0].Route != loop.ID ||
			p.CostLimit != routing.CostBound {
			t.Fatalf("message %d: routing %+v", i, p.Routing)
		}
		if stopped := strings.Contains(p.FilterErrors[0].Error, "cost limit"); stopped != (i == 0) {
			t.Fatalf("message %d: the loop's filter failed with %q", i, p.FilterErrors[0].Error)
		}
	}
}

// BenchmarkIngestRoutes ingests one message at a time with 100 routes that
// each cover it, all to one target: plain routes, against routes that each
// also have a filter over the payload, which every one of them evaluates.
func BenchmarkIngestRoutes(b *testing.B) {
	for _, filter := range []string{"", "message.payload.amount > 100"} {
		name := "plain"
		if filter != "" {
			name = "filtered"
		}
		b.Run(name, func(bb *testing.B) {
			bn := setup(bb)
			if _, err := bn.w.CreateTarget(bn.ctx, lifecycle.Target{Name: "sink", Kind: "http", Enabled: true, Config: sinkConfig}, admin); err != nil {
				bb.Fatal(err)
			}
			for range 100 {
				if _, err := bn.w.CreateRoute(bn.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "sink", Filter: filter}, admin); err != nil {
					bb.Fatal(err)
				}
			}
			in := newMessage()
			in.ContentType, in.Payload = "application/json", []byte(`{"amount": 500, "customer": {"id": 17, "name": "Acme"}}`)
			bb.ResetTimer()
			for bb.Loop() {
				if _, _, err := bn.w.Ingest(bn.ctx, in); err != nil {
					bb.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMatchRoutes is the decision alone, with 100 routes that each
// cover the message, plain or each with a filter over the payload.
func BenchmarkMatchRoutes(b *testing.B) {
	for _, filter := range []string{"", "message.payload.amount > 100"} {
		routes := make([]lifecycle.Route, 100)
		for i := range routes {
			routes[i] = lifecycle.Route{ID: uuid.New(), Source: "erp", From: "*", To: "*", Target: fmt.Sprintf("t%d", i), Filter: filter}
		}
		table, err := routing.NewTable(routes, nil)
		if err != nil {
			b.Fatal(err)
		}
		m := routing.Message{Source: "erp", From: "acme", To: "globex", ContentType: "application/json",
			Payload: []byte(`{"amount": 500, "customer": {"id": 17, "name": "Acme"}}`)}
		b.Run(fmt.Sprintf("filter=%t", filter != ""), func(b *testing.B) {
			for b.Loop() {
				if d := table.Match(m); len(d.Targets) != 100 {
					b.Fatal(d.Targets)
				}
			}
		})
	}
}
