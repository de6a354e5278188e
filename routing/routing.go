// Package routing is the routing decision: which routes take a message, by
// its source, parties, type and a CEL filter over its content. It holds the
// one CEL environment Waybill evaluates expressions in, over the message
// and nothing else.
package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// CostLimit bounds what one evaluation of an expression may cost, in CEL's
// units (about one per operation or element visited, meter.go): enough for
// a filter that looks through a payload's list of a few thousand items. It
// bounds the work, deterministically, so the audit decides as the dispatch
// did.
const CostLimit = 100_000

// CostBound names the bound the filters of a decision run under, the meter
// at CostLimit, its calls priced by the sizes of their arguments before
// they run, on payloads read exactly (decodeJSON), which the decision
// records (journal.Routing.CostLimit).
const CostBound = "meter2 100000"

// legacyBound names the meter of before, which priced a call as its
// overload was resolved when checked, so a call on a dyn value at 1, and
// once it had run, on payloads whose numbers were all doubles: the bound
// of older decisions, which the audit matches again under it.
const legacyBound = "meter 100000"

// Message is what an expression sees of a message.
type Message struct {
	Source      string
	From        string
	To          string
	Type        string
	Headers     map[string]string
	ContentType string
	Size        int64
	// Payload is the body. An expression sees it parsed when the content
	// type is JSON, as text when it is UTF-8, and as null otherwise.
	Payload []byte
}

// fields are the names an expression may read of message.
var fields = []string{"source", "from", "to", "type", "headers", "content_type", "size", "payload"}

// env is the environment of every expression: one variable, message.
var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("message", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
	)
	if err != nil {
		panic(err)
	}
	return e
}()

// Program is a compiled expression.
type Program struct {
	src string
	prg cel.Program
	// tracked is the program under cel-go's own cost tracker and
	// CostLimit, made when first asked: how filters were bounded before
	// the meter, by which the audit matches the decisions of then.
	tracked func() (cel.Program, error)
	// payload says the expression may read message.payload, so the
	// payload must be parsed for it.
	payload bool
}

// compile compiles and checks src, which must yield a value of type want
// (or dyn, checked when evaluated). A problem is a *lifecycle.FieldError on
// field with the line and column and CEL's message.
func compile(field, src string, want *cel.Type) (*Program, error) {
	checked, iss := env.Compile(src)
	if iss.Err() != nil {
		var problems []string
		for _, e := range iss.Errors() {
			problems = append(problems, fmt.Sprintf("at %d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return nil, &lifecycle.FieldError{Field: field, Problem: strings.Join(problems, "; ")}
	}
	if out := checked.OutputType(); !want.IsAssignableType(out) && !out.IsExactType(cel.DynType) {
		return nil, &lifecycle.FieldError{Field: field, Problem: fmt.Sprintf("must yield a %s, yields a %s", want, out)}
	}
	if err := checkFields(field, checked); err != nil {
		return nil, err
	}
	prg, err := env.Program(checked, cel.CustomDecoratorV2(metered))
	if err != nil {
		return nil, &lifecycle.FieldError{Field: field, Problem: err.Error()}
	}
	tracked := sync.OnceValues(func() (cel.Program, error) { return env.Program(checked, cel.CostLimit(CostLimit)) })
	// Any mention of payload counts: message["payload"] reads it too.
	return &Program{src: src, prg: prg, tracked: tracked, payload: strings.Contains(src, "payload")}, nil
}

// checkFields refuses a field of message that does not exist, which CEL's
// checker, message being a map, would leave to each evaluation.
func checkFields(field string, checked *cel.Ast) error {
	a := checked.NativeRep()
	for _, e := range ast.MatchDescendants(ast.NavigateAST(a), ast.KindMatcher(ast.SelectKind)) {
		sel := e.AsSelect()
		if sel.Operand().Kind() != ast.IdentKind || sel.Operand().AsIdent() != "message" || slices.Contains(fields, sel.FieldName()) {
			continue
		}
		loc := a.SourceInfo().GetStartLocation(e.ID())
		return &lifecycle.FieldError{Field: field, Problem: fmt.Sprintf("at %d:%d: message has no field %q; it has %s",
			loc.Line(), loc.Column()+1, sel.FieldName(), strings.Join(fields, ", "))}
	}
	return nil
}

// CompileFilter compiles a route's filter, which must yield a bool.
func CompileFilter(src string) (*Program, error) {
	return compile("filter", src, cel.BoolType)
}

// Input is a message as the expressions of one decision read it: its
// payload is parsed once, when the first expression that reads it runs.
type Input struct {
	m      Message
	fields map[string]any
	parsed bool
	// legacy reads a JSON payload as the decisions of legacyBound and
	// before read it: every number a double, a key given twice as its
	// last value, and a payload with a number past a double's range as
	// text.
	legacy bool
	// act is the variables as made last, with the payload once parsed.
	act interpreter.Activation
	// meter is the cost of the evaluation under way.
	meter meter
}

// NewInput makes the input of the expressions on m.
func NewInput(m Message) *Input { return newInput(m, false) }

// newInput makes the input of the expressions on m, reading a JSON
// payload as legacy says.
func newInput(m Message, legacy bool) *Input {
	headers := m.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	return &Input{m: m, legacy: legacy, fields: map[string]any{
		"source": m.Source, "from": m.From, "to": m.To, "type": m.Type, "headers": headers,
		"content_type": m.ContentType, "size": m.Size, "payload": nil,
	}}
}

// activation is the variables of an expression, which reads the payload
// when payload says so: made once, and again once the payload is parsed.
func (in *Input) activation(payload bool) interpreter.Activation {
	if payload && !in.parsed {
		in.parsed = true
		in.fields["payload"] = parsePayload(in.m.ContentType, in.m.Payload, in.legacy)
		in.act = nil
	}
	if in.act == nil {
		// A map of values of the types the adapter knows never fails.
		in.act, _ = interpreter.NewActivation(map[string]any{"message": types.DefaultTypeAdapter.NativeToValue(in.fields)})
	}
	return in.act
}

// parsePayload is the payload as an expression sees it: the JSON value when
// the content type is JSON and the body parses (decodeJSON, or as
// encoding/json decodes it if legacy), else the text when it is UTF-8,
// else nil.
func parsePayload(contentType string, body []byte, legacy bool) any {
	switch {
	case !isJSON(contentType):
	case legacy:
		var v any
		if json.Unmarshal(body, &v) == nil {
			return v
		}
	case json.Valid(body):
		return decodeJSON(body)
	}
	if utf8.Valid(body) {
		return string(body)
	}
	return nil
}

// isJSON reports application/json and the +json types, whatever their
// parameters.
func isJSON(contentType string) bool {
	t, _, _ := strings.Cut(contentType, ";")
	t = strings.ToLower(strings.TrimSpace(t))
	return t == "application/json" || strings.HasSuffix(t, "+json")
}

// run evaluates p on in within CostLimit, at the prices of legacyBound
// if legacy says so.
func (p *Program) run(in *Input, legacy bool) (ref.Val, error) {
	in.meter.reset(in.activation(p.payload), legacy)
	out, _, err := p.prg.Eval(&in.meter)
	return out, err
}

// Eval runs the filter on in: whether it matched, or why it failed (an
// error at run time, the cost limit passed, a value that is no bool).
func (p *Program) Eval(in *Input) (bool, error) {
	return p.evalUnder(in, CostBound)
}

// evalUnder is Eval with the filter bounded as bound names: CostBound,
// legacyBound, or "" for cel-go's own tracker.
func (p *Program) evalUnder(in *Input, bound string) (bool, error) {
	var out ref.Val
	var err error
	switch bound {
	case CostBound, legacyBound:
		out, err = p.run(in, bound == legacyBound)
	case "":
		var prg cel.Program
		if prg, err = p.tracked(); err == nil {
			out, _, err = prg.Eval(in.activation(p.payload))
		}
	default:
		return false, fmt.Errorf("%w: %q", ErrUnknownBound, bound)
	}
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("yields %s, not a bool", out.Type())
	}
	return b, nil
}

// Table is a set of routes with their filters compiled, in the order the
// decision lists what matched.
type Table struct {
	routes   []lifecycle.Route
	programs []*Program // nil for a route without a filter
}

// NewTable compiles the filters of routes, reusing the programs of prev
// (which may be nil) for the filters it has, so that a table remade with
// the same routes compiles nothing. A filter that does not compile is an
// error naming its route: a route is checked when saved, so it means a
// route saved by a build that allowed more.
func NewTable(routes []lifecycle.Route, prev *Table) (*Table, error) {
	compiled := map[string]*Program{}
	if prev != nil {
		for _, p := range prev.programs {
			if p != nil {
				compiled[p.src] = p
			}
		}
	}
	t := &Table{routes: routes, programs: make([]*Program, len(routes))}
	for i, r := range routes {
		if r.Filter == "" {
			continue
		}
		p := compiled[r.Filter]
		if p == nil {
			var err error
			if p, err = CompileFilter(r.Filter); err != nil {
				return nil, fmt.Errorf("route %s: %w", r.ID, err)
			}
			compiled[r.Filter] = p
		}
		t.programs[i] = p
	}
	return t, nil
}

// Routes are the table's routes.
func (t *Table) Routes() []lifecycle.Route { return t.routes }

// ReadsPayload reports whether a filter may read the payload, which then
// must be at hand for Match.
func (t *Table) ReadsPayload() bool {
	return slices.ContainsFunc(t.programs, func(p *Program) bool { return p != nil && p.payload })
}

// Decision is where a message goes.
type Decision struct {
	// Targets are the distinct targets of the routes that matched, in
	// name order.
	Targets []string
	journal.Routing
}

// Match is the one routing decision: the routes whose source is the
// message's, whose from and to patterns cover its parties
// (lifecycle.Route.Covers), whose types cover its type (CoversType) and
// whose filter yields true. A filter that fails does not match and is
// recorded with its error. Overlapping routes to one target yield it once.
// It depends on nothing but m and the table. A decision in which a filter
// ran records CostBound.
func (t *Table) Match(m Message) Decision {
	d, _ := t.MatchUnder(m, CostBound)
	return d
}

// ErrUnknownBound is a decision's bound on its filters' cost that this
// build does not know.
var ErrUnknownBound = errors.New("unknown bound on the cost of filters")

// MatchUnder is Match with the filters bounded as bound names (a recorded
// journal.Routing.CostLimit): the audit's, which matches each decision
// again under the bound of its time.
func (t *Table) MatchUnder(m Message, bound string) (Decision, error) {
	var d Decision
	var in *Input
	for i, r := range t.routes {
		if !r.Covers(m.Source, m.From, m.To) || !r.CoversType(m.Type) {
			continue
		}
		if p := t.programs[i]; p != nil {
			if in == nil {
				in = newInput(m, bound != CostBound)
				d.CostLimit = bound
			}
			ok, err := p.evalUnder(in, bound)
			if errors.Is(err, ErrUnknownBound) {
				return Decision{}, err
			}
			if err != nil {
				// The error may quote the payload (a value that does not
				// convert), which the decision is no place for.
				d.FilterErrors = append(d.FilterErrors, journal.FilterError{Route: r.ID,
					Error: lifecycle.Cut(err.Error(), lifecycle.MaxErrorTextLength)})
				continue
			}
			if !ok {
				continue
			}
		}
		d.Routes = append(d.Routes, journal.MatchedRoute{ID: r.ID, Target: r.Target, Types: r.Types, Filter: r.Filter})
		if !slices.Contains(d.Targets, r.Target) {
			d.Targets = append(d.Targets, r.Target)
		}
	}
	slices.Sort(d.Targets)
	return d, nil
}
