package routing

import (
	"fmt"
	"strings"

	"github.com/waybill/waybill/lifecycle"
)

// Verdict is what one route makes of a message, for a person trying the
// routes out.
type Verdict struct {
	Route   lifecycle.Route
	Matched bool
	// Why says why the route did not take the message: its source,
	// parties or types, its filter yielding false, or its filter's error.
	Why string
}

// Trial is what the routes and the targets' transforms make of a message.
type Trial struct {
	Decision
	// Verdicts are the routes' verdicts, in the table's order.
	Verdicts []Verdict
	// Shapes are what each target's transform makes of its delivery, by
	// target: nil for one sent as it is.
	Shapes map[string]*Shaped
}

// Try decides m as Match does, with each route's verdict, and runs the
// transform of each target it goes to as the delivery's making would,
// with payloads of at most maxPayload bytes. It writes nothing and
// depends on nothing but m, the table and the transforms.
func Try(t *Table, tf Transforms, m Message, maxPayload int64) Trial {
	tr := Trial{Decision: t.Match(m), Shapes: map[string]*Shaped{}}
	failed := map[string]string{}
	for _, e := range tr.FilterErrors {
		failed[e.Route.String()] = e.Error
	}
	matched := map[string]bool{}
	for _, r := range tr.Routes {
		matched[r.ID.String()] = true
	}
	for _, r := range t.routes {
		v := Verdict{Route: r, Matched: matched[r.ID.String()]}
		switch {
		case v.Matched:
		case r.Source != m.Source:
			v.Why = fmt.Sprintf("its source is %s, not %s", r.Source, m.Source)
		case !r.Covers(m.Source, m.From, m.To):
			v.Why = fmt.Sprintf("it takes %s → %s, not %s → %s", r.From, r.To, m.From, m.To)
		case !r.CoversType(m.Type):
			v.Why = fmt.Sprintf("its types %s do not take %q", strings.Join(r.Types, ", "), m.Type)
		case failed[r.ID.String()] != "":
			v.Why = "its filter failed: " + failed[r.ID.String()]
		default:
			v.Why = "its filter yields false"
		}
		tr.Verdicts = append(tr.Verdicts, v)
	}
	in := NewInput(m)
	for _, target := range tr.Targets {
		tr.Shapes[target] = tf.Shape(target, m, in, maxPayload)
	}
	return tr
}
