package projection

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/routing"
)

// routeLedger follows the routes through the config stream, so that the
// audit matches each dispatch again against the routes of the version of
// the configuration it names (journal.Routing), and finds it a pure
// function of the message and those routes.
type routeLedger struct {
	// routes are those in force after the last config event, oldest
	// first; versions, each version at which they changed, in order.
	routes   []lifecycle.Route
	versions []*routeVersion
	// pending are the dispatches whose routes read the payload, matched
	// once the fold is done (checkPayloadRoutes).
	pending []pendingRouting
}

type routeVersion struct {
	version int64
	routes  []lifecycle.Route
	table   *routing.Table // compiled on first use
	err     error
}

type pendingRouting struct {
	position int64
	message  routing.Message
	id       uuid.UUID
	version  *routeVersion
	recorded journal.Routing
}

// configure follows a route event at its version.
func (l *routeLedger) configure(e journal.Event) {
	switch p := e.Payload.(type) {
	case *journal.RouteCreated:
		l.routes = append(slices.Clone(l.routes), p.Route)
	case *journal.RouteUpdated:
		l.routes = slices.Clone(l.routes)
		if i := slices.IndexFunc(l.routes, func(r lifecycle.Route) bool { return r.ID == p.Route.ID }); i >= 0 {
			l.routes[i] = p.Route
		}
	case *journal.RouteDeleted:
		l.routes = slices.DeleteFunc(slices.Clone(l.routes), func(r lifecycle.Route) bool { return r.ID == p.ID })
	default:
		return
	}
	l.versions = append(l.versions, &routeVersion{version: int64(e.Version), routes: l.routes})
}

// at is the routes of config version v, compiled, reusing the programs of
// the version before.
func (l *routeLedger) at(v int64) *routeVersion {
	i, found := slices.BinarySearchFunc(l.versions, v, func(r *routeVersion, v int64) int { return cmp.Compare(r.version, v) })
	if !found {
		i--
	}
	if i < 0 {
		return &routeVersion{table: &routing.Table{}}
	}
	rv := l.versions[i]
	if rv.table == nil && rv.err == nil {
		var prev *routing.Table
		if i > 0 {
			prev = l.versions[i-1].table
		}
		rv.table, rv.err = routing.NewTable(rv.routes, prev)
	}
	return rv
}

// routingOf is the decision a dispatch, redispatch or replay recorded;
// false for any other event, and for one of before decisions were recorded.
func routingOf(p journal.Payload) (journal.Routing, bool) {
	var r journal.Routing
	switch p := p.(type) {
	case *journal.MessageDispatched:
		r = p.Routing
	case *journal.MessageRedispatched:
		r = p.Routing
	case *journal.MessageResent:
		r = p.Routing
	}
	return r, r.ConfigVersion > 0
}

// checkRouting matches the message m of a routing event e again, now when
// the routes do not read the payload, else once the fold is done.
func (f *Folded) checkRouting(m *Message, e journal.Event) {
	recorded, ok := routingOf(e.Payload)
	if !ok {
		return
	}
	rv := f.routes.at(recorded.ConfigVersion)
	msg := routing.Message{Source: m.Source, From: m.From, To: m.To, Type: m.Type, Headers: m.Headers,
		ContentType: m.ContentType, Size: m.PayloadSize}
	if rv.err == nil && rv.table.ReadsPayload() {
		f.routes.pending = append(f.routes.pending, pendingRouting{position: e.Position, message: msg, id: m.ID,
			version: rv, recorded: recorded})
		return
	}
	f.compareRouting(e.Position, m.ID, rv, msg, recorded)
}

// compareRouting reports a decision that is not what the routes of its
// version decide on msg now.
func (f *Folded) compareRouting(position int64, id uuid.UUID, rv *routeVersion, msg routing.Message, recorded journal.Routing) {
	if rv.err != nil {
		f.Violations = append(f.Violations, Violation{Position: position, MessageID: id,
			Problem: fmt.Sprintf("the routes of config version %d do not compile: %v", recorded.ConfigVersion, rv.err)})
		return
	}
	now, err := rv.table.MatchUnder(msg, recorded.CostLimit)
	if err != nil {
		f.Violations = append(f.Violations, Violation{Position: position, MessageID: id, Problem: err.Error()})
		return
	}
	if sameRouting(now.Routing, recorded) {
		return
	}
	f.Violations = append(f.Violations, Violation{Position: position, MessageID: id,
		Problem: fmt.Sprintf("routed %s, but the routes of config version %d route it %s",
			routingWords(recorded), recorded.ConfigVersion, routingWords(now.Routing))})
}

// sameRouting compares the routes matched and the filters failed, in any
// order: routes created in one instant are listed by id. A filter's error
// is compared as routing cuts it (lifecycle.MaxErrorTextLength): a journal
// may hold one whole, recorded before errors were cut. A route whose
// filter the time limit stopped in either is left out: that limit reads a
// clock, so the same filter on the same message may run to its end on
// another machine or stop on this one (routing.TimeLimit).
func sameRouting(a, b journal.Routing) bool {
	clocked := map[uuid.UUID]bool{}
	for _, e := range slices.Concat(a.FilterErrors, b.FilterErrors) {
		if routing.TimeLimited(e.Error) {
			clocked[e.Route] = true
		}
	}
	byID := func(x, y journal.MatchedRoute) int { return cmp.Compare(x.ID.String(), y.ID.String()) }
	errByID := func(x, y journal.FilterError) int { return cmp.Compare(x.Route.String(), y.Route.String()) }
	kept := func(r journal.Routing) ([]journal.MatchedRoute, []journal.FilterError) {
		routes := slices.DeleteFunc(slices.Clone(r.Routes), func(m journal.MatchedRoute) bool { return clocked[m.ID] })
		failed := slices.DeleteFunc(slices.Clone(r.FilterErrors), func(e journal.FilterError) bool { return clocked[e.Route] })
		slices.SortFunc(routes, byID)
		slices.SortFunc(failed, errByID)
		return routes, failed
	}
	ar, ae := kept(a)
	br, be := kept(b)
	return slices.EqualFunc(ar, br, func(x, y journal.MatchedRoute) bool {
		return x.ID == y.ID && x.Target == y.Target && slices.Equal(x.Types, y.Types) && x.Filter == y.Filter
	}) && slices.EqualFunc(ae, be, func(x, y journal.FilterError) bool {
		return x.Route == y.Route &&
			lifecycle.Cut(x.Error, lifecycle.MaxErrorTextLength) == lifecycle.Cut(y.Error, lifecycle.MaxErrorTextLength)
	})
}

func routingWords(r journal.Routing) string {
	var ids []string
	for _, m := range r.Routes {
		ids = append(ids, m.ID.String()+" to "+m.Target)
	}
	s := fmt.Sprintf("by routes %v", ids)
	for _, e := range r.FilterErrors {
		s += fmt.Sprintf(", the filter of %s failing (%s)", e.Route, e.Error)
	}
	return s
}

// payloadBatch is how many payloads checkPayloadRoutes reads at once.
const payloadBatch = 500

// checkPayloadRoutes matches again the dispatches whose routes read the
// payload, with the payloads read on q; one whose payload retention
// expunged or removed is left unchecked.
func (f *Folded) checkPayloadRoutes(ctx context.Context, q journal.Querier) error {
	pending := f.routes.pending
	for start := 0; start < len(pending); start += payloadBatch {
		part := pending[start:min(start+payloadBatch, len(pending))]
		ids := make([]uuid.UUID, len(part))
		for i, p := range part {
			ids[i] = p.id
		}
		bodies := map[uuid.UUID][]byte{}
		err := scanRows(ctx, q, payloadsSQL, []any{ids}, func(rows pgx.Rows) error {
			var (
				id   uuid.UUID
				body []byte
			)
			if err := rows.Scan(&id, &body); err != nil {
				return err
			}
			bodies[id] = body
			return nil
		})
		if err != nil {
			return fmt.Errorf("read payloads to route: %w", err)
		}
		for _, p := range part {
			body, ok := bodies[p.id]
			if !ok {
				continue
			}
			p.message.Payload = body
			f.compareRouting(p.position, p.id, p.version, p.message, p.recorded)
		}
	}
	return nil
}
