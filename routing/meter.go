package routing

import (
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// The meter bounds an evaluation's cost, in place of cel-go's own tracker,
// whose stack of values is searched whole several times a step and so
// costs the square of a loop's steps: it stops a loop at the limit in
// milliseconds where cel-go's took a second (docs/performance.md, "Loops
// and the cost limit"). A select or an ident costs 1, and 1 more for each
// field or index it qualifies by; a constant nothing; a list, map or
// struct made 10, 30 or 40; a conditional 1; a presence test 1. Every
// step of a loop reads its accumulator, so each step costs at least 1,
// and the limit bounds the steps.
//
// A call costs 1, or, for the functions whose work or result grows with
// their arguments, by the sizes of the arguments it is given, whatever
// their type was when checked (a payload's values are dyn, so the checker
// names no overload of theirs): callPrices. The price is known once the
// arguments are, so the meter checks it then, and a call that would pass
// the limit never runs: the work and the allocation are not done.
//
// Each node of a program is wrapped to price what it did: the values its
// arguments produced are the ones pushed on the meter's stack while it
// ran, so a call finds them without a search.

// TimeLimit bounds an evaluation's time, beside CostLimit, which should
// stop it long before: a backstop for work the prices miss. The clock is
// read every timeCheck nodes, and the time counted from the first
// reading, so an evaluation of fewer nodes never reads it.
const TimeLimit = time.Second

const timeCheck = 64

// meter is one evaluation's cost and the values its nodes produced, made
// reachable from every frame as the root of its activations.
type meter struct {
	vars  interpreter.Activation
	cost  uint64
	stack []ref.Val
	// legacy prices as the meter did before it priced calls by size and
	// checked them before they run (legacyBound).
	legacy bool
	// nodes are the nodes run, and start when the clock was first read
	// (TimeLimit).
	nodes uint
	start time.Time
}

// ResolveName implements interpreter.Activation.
func (m *meter) ResolveName(name string) (any, bool) { return m.vars.ResolveName(name) }

// Parent implements interpreter.Activation.
func (m *meter) Parent() interpreter.Activation { return nil }

// reset readies m for an evaluation over vars, at the prices legacy says.
func (m *meter) reset(vars interpreter.Activation, legacy bool) {
	m.vars, m.cost, m.stack, m.legacy, m.nodes, m.start = vars, 0, m.stack[:0], legacy, 0, time.Time{}
}

// meterOf finds the meter an activation descends from: a comprehension's
// frames are children of the evaluation's.
func meterOf(a interpreter.Activation) *meter {
	for a != nil {
		switch v := a.(type) {
		case *meter:
			return v
		case *interpreter.ExecutionFrame:
			a = v.Unwrap()
		default:
			a = a.Parent()
		}
	}
	return nil
}

// errCostLimit is cel-go's own cancellation, so a stopped evaluation
// fails as it did under cel-go's tracker.
var errCostLimit = interpreter.EvalCancelledError{Cause: interpreter.CostLimitExceeded,
	Message: "operation cancelled: actual cost limit exceeded"}

// errTimeLimit stops an evaluation past TimeLimit.
var errTimeLimit = interpreter.EvalCancelledError{Cause: interpreter.ContextCancelled,
	Message: "operation cancelled: time limit of " + TimeLimit.String() + " exceeded"}

// TimeLimited reports whether text, a filter's error as a decision
// records it, is TimeLimit's: a stop by the clock, which an evaluation
// of the same filter on the same message need not repeat.
func TimeLimited(text string) bool { return text == errTimeLimit.Message }

// check stops the evaluation if price would take it past CostLimit.
func (m *meter) check(price uint64) {
	if price > CostLimit-m.cost {
		panic(errCostLimit)
	}
}

// ran records a node's value v and what it cost, its arguments' values
// being those pushed since the stack was h high, and stops the evaluation
// past CostLimit or TimeLimit.
func (m *meter) ran(h int, v ref.Val, price uint64) {
	m.check(price)
	m.cost += price
	m.stack = append(m.stack[:h], v)
	if m.nodes++; m.nodes%timeCheck == 0 {
		now := time.Now()
		if m.start.IsZero() {
			m.start = now
		} else if now.Sub(m.start) > TimeLimit {
			panic(errTimeLimit)
		}
	}
}

// callPrice is what a call costs, from its arguments' values.
type callPrice func(args []ref.Val) uint64

// before checks the price of a call as soon as its last argument has its
// value, the call's arguments being the top n values of the stack.
type before struct {
	price callPrice
	n     int
}

// checkCall checks the price of the call whose last argument has just
// run, if it is one before names.
func (m *meter) checkCall(b *before) {
	if b != nil && !m.legacy {
		m.check(b.price(m.stack[len(m.stack)-b.n:]))
	}
}

// metered prices every node of a program (the program option of compile).
func metered(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	switch n := i.(type) {
	case *meteredNode, *meteredAttr, *meteredConst:
		return i, nil
	case interpreter.InterpretableConst:
		return &meteredConst{InterpretableConst: n}, nil
	case interpreter.InterpretableAttribute:
		return &meteredAttr{InterpretableAttribute: n}, nil
	case interpreter.InterpretableCall:
		node := &meteredNode{InterpretableV2: n, flat: 1, legacy: legacyPrice(n.OverloadID())}
		if price := callPrices[n.Function()]; price != nil {
			node.price = price
			if args := n.Args(); len(args) > 0 {
				setBefore(args[len(args)-1], &before{price: price, n: len(args)})
			}
		}
		return node, nil
	case interpreter.InterpretableConstructor:
		base := uint64(common.StructCreateBaseCost)
		switch n.Type() {
		case types.ListType:
			base = common.ListCreateBaseCost
		case types.MapType:
			base = common.MapCreateBaseCost
		}
		return &meteredNode{InterpretableV2: n, flat: base}, nil
	default:
		return &meteredNode{InterpretableV2: n}, nil
	}
}

// setBefore has the last argument of a call check its price.
func setBefore(arg interpreter.InterpretableV2, b *before) {
	switch a := arg.(type) {
	case *meteredNode:
		a.before = b
	case *meteredAttr:
		a.before = b
	case *meteredConst:
		a.before = b
	}
}

// meteredNode is a call, a constructor or a node that costs nothing of
// its own (and, or, a comprehension).
type meteredNode struct {
	interpreter.InterpretableV2
	// flat is the price of a node that is no call priced by size.
	flat  uint64
	price callPrice
	// legacy is a call's price under legacyBound.
	legacy func(args []ref.Val, result ref.Val) uint64
	// before is set on the last argument of a call priced by size.
	before *before
}

// Exec implements interpreter.InterpretableV2.
func (n *meteredNode) Exec(f *interpreter.ExecutionFrame) ref.Val {
	m := meterOf(f)
	h := len(m.stack)
	v := n.InterpretableV2.Exec(f)
	price := n.flat
	switch {
	case m.legacy && n.legacy != nil:
		price = n.legacy(m.stack[h:], v)
	case !m.legacy && n.price != nil:
		price = n.price(m.stack[h:])
	}
	m.ran(h, v, price)
	m.checkCall(n.before)
	return v
}

// Eval implements interpreter.Interpretable.
func (n *meteredNode) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// meteredAttr is a select, an ident, an index or a conditional; it stays
// an attribute, which the planner extends with the qualifiers that follow
// it.
type meteredAttr struct {
	interpreter.InterpretableAttribute
	qualifiers uint64
	before     *before
}

// AddQualifier implements interpreter.InterpretableAttribute, counting
// the qualifier into the price.
func (n *meteredAttr) AddQualifier(q interpreter.Qualifier) (interpreter.Attribute, error) {
	n.qualifiers++
	_, err := n.InterpretableAttribute.AddQualifier(q)
	return n, err
}

// Exec implements interpreter.InterpretableV2.
func (n *meteredAttr) Exec(f *interpreter.ExecutionFrame) ref.Val {
	m := meterOf(f)
	h := len(m.stack)
	v := n.InterpretableAttribute.Exec(f)
	m.ran(h, v, common.SelectAndIdentCost+n.qualifiers)
	m.checkCall(n.before)
	return v
}

// Eval implements interpreter.Interpretable.
func (n *meteredAttr) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// meteredConst is a constant, which costs nothing but is an argument like
// any other.
type meteredConst struct {
	interpreter.InterpretableConst
	before *before
}

// Exec implements interpreter.InterpretableV2.
func (n *meteredConst) Exec(f *interpreter.ExecutionFrame) ref.Val {
	m := meterOf(f)
	v := n.InterpretableConst.Exec(f)
	m.stack = append(m.stack, v)
	m.checkCall(n.before)
	return v
}

// Eval implements interpreter.Interpretable.
func (n *meteredConst) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// traverse is the price of walking n bytes or entries, cel-go's.
func traverse(n uint64) uint64 {
	return uint64(math.Ceil(float64(n) * common.StringTraversalCostFactor))
}

// maxExtent is the most of a value a price needs to see: an extent past
// it prices past CostLimit in any call.
const maxExtent = CostLimit * 10

// callPrices are the calls priced by the sizes of their arguments, by
// function: cel-go's prices, but by the values the call is given, and
// with what it makes, at 1 a byte or an entry, as the string extension
// prices its own; where cel-go says 1, a call that reads a string whole
// costs 1 or more by its length. A string's size is its bytes. Any other
// call costs 1.
var callPrices = map[string]callPrice{
	// Strings and bytes read whole: their runes counted, copied, parsed.
	overloads.Size: func(args []ref.Val) uint64 {
		if _, ok := args[0].(types.String); ok {
			return max(1, traverse(length(args[0])))
		}
		return 1
	},
	overloads.TypeConvertString: func(args []ref.Val) uint64 {
		if _, ok := args[0].(types.Bytes); ok {
			return traverse(length(args[0]))
		}
		return 1
	},
	overloads.TypeConvertBytes: func(args []ref.Val) uint64 {
		if _, ok := args[0].(types.String); ok {
			return traverse(length(args[0]))
		}
		return 1
	},
	overloads.TypeConvertInt:       parse,
	overloads.TypeConvertUint:      parse,
	overloads.TypeConvertDouble:    parse,
	overloads.TypeConvertTimestamp: parse,
	overloads.TypeConvertDuration:  parse,
	// Strings compared, joined, searched or matched.
	operators.Less:          order,
	operators.LessEquals:    order,
	operators.Greater:       order,
	operators.GreaterEquals: order,
	operators.Add: func(args []ref.Val) uint64 {
		if isText(args[0]) && isText(args[1]) {
			return traverse(length(args[0]) + length(args[1]))
		}
		return 1
	},
	overloads.StartsWith: func(args []ref.Val) uint64 { return traverse(length(args[1])) },
	overloads.EndsWith:   func(args []ref.Val) uint64 { return traverse(length(args[1])) },
	overloads.Contains: func(args []ref.Val) uint64 {
		return traverse(length(args[0])) * traverse(length(args[1]))
	},
	overloads.Matches: func(args []ref.Val) uint64 {
		return traverse(1+length(args[0])) * uint64(math.Ceil(float64(length(args[1]))*common.RegexStringLengthCostFactor))
	},
	// Values compared whole, however deep.
	operators.Equals:    equal,
	operators.NotEquals: equal,
	operators.In: func(args []ref.Val) uint64 {
		switch in := args[1].(type) {
		case traits.Mapper:
			return max(1, traverse(length(args[0])))
		case traits.Lister:
			x := extent(args[0], maxExtent)
			var walked uint64
			for it := in.Iterator(); it.HasNext() == types.True && walked <= maxExtent; {
				walked += min(extent(it.Next(), x), x)
			}
			return max(count(in), traverse(walked))
		}
		return 1
	},
	// The string extension's, with the size of what they make.
	"charAt":      func(args []ref.Val) uint64 { return 2 + traverse(length(args[0])) },
	"indexOf":     search,
	"lastIndexOf": search,
	"lowerAscii":  remake,
	"upperAscii":  remake,
	"trim":        remake,
	"reverse":     remake,
	"substring": func(args []ref.Val) uint64 {
		made := length(args[0])
		start, _ := args[1].(types.Int)
		if end, ok := arg(args, 2).(types.Int); ok && end >= start {
			made = min(made, uint64(end-start))
		} else if start > 0 {
			made -= min(made, uint64(start))
		}
		return 1 + traverse(length(args[0])) + made
	},
	"replace": func(args []ref.Val) uint64 {
		s, old, with, ok := texts(args[0], args[1], args[2])
		if !ok {
			return 1
		}
		n := strings.Count(s, old)
		if limit, ok := arg(args, 3).(types.Int); ok && limit >= 0 {
			n = min(n, int(limit))
		}
		made := uint64(len(s) + n*(len(with)-len(old)))
		return 1 + traverse(max(uint64(len(s)), 1)*max(uint64(len(old)), 1)) + made
	},
	"split": func(args []ref.Val) uint64 {
		s, sep, _, ok := texts(args[0], args[1], types.String(""))
		if !ok {
			return 1
		}
		parts := strings.Count(s, sep) + 1
		if limit, ok := arg(args, 2).(types.Int); ok && limit >= 0 {
			parts = min(parts, int(limit))
		}
		return 1 + traverse(uint64(len(s))+1) + uint64(parts) + common.ListCreateBaseCost
	},
	"join": func(args []ref.Val) uint64 {
		list, ok := args[0].(traits.Lister)
		if !ok {
			return 1
		}
		made := length(arg(args, 1)) * (max(count(list), 1) - 1)
		for it := list.Iterator(); it.HasNext() == types.True && made <= maxExtent; {
			made += length(it.Next())
		}
		return 1 + traverse(count(list)+1) + made
	},
	"format": func(args []ref.Val) uint64 {
		return traverse(length(args[0])) + length(args[0]) + extent(args[1], maxExtent)
	},
	"strings.quote": func(args []ref.Val) uint64 { return traverse(length(args[0])) + length(args[0]) + 2 },
}

// parse prices a conversion, which reads a string whole.
func parse(args []ref.Val) uint64 { return max(1, traverse(length(args[0]))) }

// order prices an ordering, which reads strings or bytes as far as the
// shorter.
func order(args []ref.Val) uint64 {
	if isText(args[0]) && isText(args[1]) {
		return traverse(min(length(args[0]), length(args[1])))
	}
	return 1
}

// equal prices an equality, which walks both values as far as the
// smaller one's extent.
func equal(args []ref.Val) uint64 {
	a := extent(args[0], maxExtent)
	return traverse(min(a, extent(args[1], a)))
}

// search prices a search of a string for another, rune by rune.
func search(args []ref.Val) uint64 { return 1 + traverse(length(args[0])*length(args[1])) }

// remake prices a string made from one, at most as long.
func remake(args []ref.Val) uint64 { return 1 + traverse(length(args[0])) + length(args[0]) }

// texts are a, b and c if they are strings.
func texts(a, b, c ref.Val) (string, string, string, bool) {
	x, okA := a.(types.String)
	y, okB := b.(types.String)
	z, okC := c.(types.String)
	return string(x), string(y), string(z), okA && okB && okC
}

// arg is the i-th argument, or nil.
func arg(args []ref.Val, i int) ref.Val {
	if i < len(args) {
		return args[i]
	}
	return nil
}

// isText reports a string or bytes.
func isText(v ref.Val) bool {
	switch v.(type) {
	case types.String, types.Bytes:
		return true
	}
	return false
}

// length is the bytes of a string or bytes value, 0 of any other.
func length(v ref.Val) uint64 {
	switch v := v.(type) {
	case types.String:
		return uint64(len(v))
	case types.Bytes:
		return uint64(len(v))
	}
	return 0
}

// count is the entries of a list or map, 1 of any other value.
func count(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok && !isText(v) {
		if n, ok := s.Size().(types.Int); ok {
			return uint64(n)
		}
	}
	return 1
}

// entryExtent is what an entry of a list or map, or a value that is no
// string, bytes, list or map, counts in an extent: as many bytes as cost
// 1 to walk, what a step of a loop costs.
const entryExtent = 10

// extent is what walking v whole visits, in bytes: a string's or bytes'
// length, entryExtent for any other value, and for a list or map the
// extents of its entries besides; counted only until it passes limit, so
// as not to walk further than a price needs. A value that holds another
// twice counts it twice, as a walk visits it twice.
func extent(v ref.Val, limit uint64) uint64 {
	if t := reflect.TypeOf(v); t == nativeList || t == nativeMap {
		if n, ok := nativeExtent(v.Value(), limit); ok {
			return n
		}
	}
	switch v := v.(type) {
	case types.String, types.Bytes:
		return length(v)
	case *types.Optional:
		if v.HasValue() {
			return extent(v.GetValue(), limit)
		}
	case traits.Mapper:
		n := uint64(entryExtent)
		for it := v.Iterator(); it.HasNext() == types.True && n <= limit; {
			k := it.Next()
			n += extent(k, limit-n)
			if n <= limit {
				e, _ := v.Find(k)
				n += extent(e, limit-n)
			}
		}
		return n
	case traits.Lister:
		n := uint64(entryExtent)
		for it := v.Iterator(); it.HasNext() == types.True && n <= limit; {
			n += extent(it.Next(), limit-n)
		}
		return n
	}
	return entryExtent
}

// nativeList and nativeMap are the types of cel-go's lists and maps over
// Go values, such as a payload's, whose Value is that Go value, not a
// copy: walked as it is, it is walked without a value made for each
// entry, as cel-go's iterators make.
var (
	nativeList = reflect.TypeOf(types.DefaultTypeAdapter.NativeToValue([]any{}))
	nativeMap  = reflect.TypeOf(types.DefaultTypeAdapter.NativeToValue(map[string]any{}))
)

// nativeExtent is extent of a Go value a list or map of cel-go's holds,
// and false for a kind of value it does not know, which cel-go's
// iterators then walk.
func nativeExtent(v any, limit uint64) (uint64, bool) {
	switch v := v.(type) {
	case string:
		return uint64(len(v)), true
	case nil, bool, float64, int64, uint64:
		return entryExtent, true
	case ref.Val:
		return extent(v, limit), true
	case []any:
		n := uint64(entryExtent)
		for _, e := range v {
			if n > limit {
				break
			}
			m, ok := nativeExtent(e, limit-n)
			if !ok {
				return 0, false
			}
			n += m
		}
		return n, true
	case []ref.Val:
		n := uint64(entryExtent)
		for _, e := range v {
			if n > limit {
				break
			}
			n += extent(e, limit-n)
		}
		return n, true
	case map[string]any:
		n := uint64(entryExtent)
		for k, e := range v {
			if n > limit {
				break
			}
			m, ok := nativeExtent(e, limit-n)
			if !ok {
				return 0, false
			}
			n += uint64(len(k)) + m
		}
		return n, true
	}
	return 0, false
}

// legacyPrice is the price of a call of overload under legacyBound,
// cel-go's: 1, or by the sizes of the arguments where the work grows with
// them, and of the result where one is made, known once the call has run.
func legacyPrice(overload string) func(args []ref.Val, result ref.Val) uint64 {
	arg := func(args []ref.Val, i int) uint64 {
		if i < len(args) {
			return celSize(args[i])
		}
		return 1
	}
	switch overload {
	case overloads.StartsWithString, overloads.EndsWithString:
		return func(args []ref.Val, result ref.Val) uint64 { return traverse(arg(args, 1)) }
	case overloads.StringToBytes, overloads.BytesToString, overloads.ExtQuoteString, overloads.ExtFormatString:
		return func(args []ref.Val, result ref.Val) uint64 { return traverse(arg(args, 0)) }
	case overloads.InList:
		return func(args []ref.Val, result ref.Val) uint64 { return arg(args, 1) }
	case overloads.LessString, overloads.GreaterString, overloads.LessEqualsString, overloads.GreaterEqualsString,
		overloads.LessBytes, overloads.GreaterBytes, overloads.LessEqualsBytes, overloads.GreaterEqualsBytes,
		overloads.Equals, overloads.NotEquals:
		return func(args []ref.Val, result ref.Val) uint64 { return traverse(min(arg(args, 0), arg(args, 1))) }
	case overloads.AddString, overloads.AddBytes:
		return func(args []ref.Val, result ref.Val) uint64 { return traverse(arg(args, 0) + arg(args, 1)) }
	case overloads.Matches, overloads.MatchesString:
		return func(args []ref.Val, result ref.Val) uint64 {
			return traverse(1+arg(args, 0)) * uint64(math.Ceil(float64(arg(args, 1))*common.RegexStringLengthCostFactor))
		}
	case overloads.ContainsString:
		return func(args []ref.Val, result ref.Val) uint64 { return traverse(arg(args, 0)) * traverse(arg(args, 1)) }
	// The string extension's, as it prices them.
	case "string_char_at_int":
		return func(args []ref.Val, result ref.Val) uint64 { return 2 + traverse(arg(args, 0)) }
	case "string_index_of_string", "string_index_of_string_int", "string_last_index_of_string", "string_last_index_of_string_int":
		return func(args []ref.Val, result ref.Val) uint64 { return 1 + traverse(arg(args, 0)*arg(args, 1)) }
	case "string_lower_ascii", "string_upper_ascii", "string_substring_int", "string_substring_int_int", "string_trim", "string_reverse":
		return func(args []ref.Val, result ref.Val) uint64 { return 1 + traverse(arg(args, 0)) + celSize(result) }
	case "string_replace_string_string", "string_replace_string_string_int":
		return func(args []ref.Val, result ref.Val) uint64 {
			return 1 + traverse(max(arg(args, 0), 1)*max(arg(args, 1), 1)) + celSize(result)
		}
	case "string_split_string", "string_split_string_int":
		return func(args []ref.Val, result ref.Val) uint64 {
			return 1 + traverse(arg(args, 0)+1) + celSize(result) + common.ListCreateBaseCost
		}
	case "list_join", "list_join_string":
		return func(args []ref.Val, result ref.Val) uint64 { return 1 + traverse(arg(args, 0)+1) + celSize(result) }
	default:
		return func([]ref.Val, ref.Val) uint64 { return 1 }
	}
}

// celSize is a value's size as cel-go prices it: a string's (in runes),
// bytes', list's or map's, an optional's value's, else 1.
func celSize(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok {
		if n, ok := s.Size().(types.Int); ok {
			return uint64(n)
		}
	}
	if o, ok := v.(*types.Optional); ok && o.HasValue() {
		return celSize(o.GetValue())
	}
	return 1
}
