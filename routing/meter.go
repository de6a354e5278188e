package routing

import (
	"math"

	"github.com/google/cel-go/common"
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
// and the cost limit"). Its prices are cel-go's: a select or an ident 1,
// and 1 more for each field or index it qualifies by; a constant nothing;
// a list, map or struct made 10, 30 or 40; a call 1, or by the sizes of
// its arguments and result for the functions whose work grows with them
// (strings and bytes compared, joined, searched, matched or changed, a
// list searched by in), the string extension's as it prices them. A
// conditional costs 1 (cel-go: nothing), a presence test 1 (cel-go: 1
// and its qualifiers). Every step of a loop reads its accumulator, so
// each step costs at least 1, and the limit bounds the steps.
//
// Each node of a program is wrapped to price what it did: the values its
// arguments produced are the ones pushed on the meter's stack while it
// ran, so a call finds them without a search.

// meter is one evaluation's cost and the values its nodes produced, made
// reachable from every frame as the root of its activations.
type meter struct {
	vars  interpreter.Activation
	cost  uint64
	stack []ref.Val
}

// ResolveName implements interpreter.Activation.
func (m *meter) ResolveName(name string) (any, bool) { return m.vars.ResolveName(name) }

// Parent implements interpreter.Activation.
func (m *meter) Parent() interpreter.Activation { return nil }

// reset readies m for an evaluation over vars.
func (m *meter) reset(vars interpreter.Activation) {
	m.vars, m.cost, m.stack = vars, 0, m.stack[:0]
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

// ran records a node's value v and what it cost, its arguments' values
// being those pushed since the stack was h high, and stops the evaluation
// past CostLimit.
func (m *meter) ran(h int, v ref.Val, price func(args []ref.Val, result ref.Val) uint64) {
	m.cost += price(m.stack[h:], v)
	m.stack = append(m.stack[:h], v)
	if m.cost > CostLimit {
		panic(errCostLimit)
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
		return &meteredNode{InterpretableV2: n, price: callPrice(n.OverloadID())}, nil
	case interpreter.InterpretableConstructor:
		base := uint64(common.StructCreateBaseCost)
		switch n.Type() {
		case types.ListType:
			base = common.ListCreateBaseCost
		case types.MapType:
			base = common.MapCreateBaseCost
		}
		return &meteredNode{InterpretableV2: n, price: func([]ref.Val, ref.Val) uint64 { return base }}, nil
	default:
		return &meteredNode{InterpretableV2: n, price: func([]ref.Val, ref.Val) uint64 { return 0 }}, nil
	}
}

// meteredNode is a call, a constructor or a node that costs nothing of
// its own (and, or, a comprehension).
type meteredNode struct {
	interpreter.InterpretableV2
	price func(args []ref.Val, result ref.Val) uint64
}

// Exec implements interpreter.InterpretableV2.
func (n *meteredNode) Exec(f *interpreter.ExecutionFrame) ref.Val {
	m := meterOf(f)
	h := len(m.stack)
	v := n.InterpretableV2.Exec(f)
	m.ran(h, v, n.price)
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
	m.ran(h, v, func([]ref.Val, ref.Val) uint64 { return common.SelectAndIdentCost + n.qualifiers })
	return v
}

// Eval implements interpreter.Interpretable.
func (n *meteredAttr) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// meteredConst is a constant, which costs nothing but is an argument like
// any other.
type meteredConst struct {
	interpreter.InterpretableConst
}

// Exec implements interpreter.InterpretableV2.
func (n *meteredConst) Exec(f *interpreter.ExecutionFrame) ref.Val {
	m := meterOf(f)
	v := n.InterpretableConst.Exec(f)
	m.stack = append(m.stack, v)
	return v
}

// Eval implements interpreter.Interpretable.
func (n *meteredConst) Eval(a interpreter.Activation) ref.Val { return n.Exec(interpreter.AsFrame(a)) }

// callPrice is the price of a call of overload, cel-go's: 1, or by the
// sizes of the arguments where the work grows with them, and of the
// result where one is made.
func callPrice(overload string) func(args []ref.Val, result ref.Val) uint64 {
	traverse := func(n uint64) uint64 { return uint64(math.Ceil(float64(n) * common.StringTraversalCostFactor)) }
	arg := func(args []ref.Val, i int) uint64 {
		if i < len(args) {
			return size(args[i])
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
		return func(args []ref.Val, result ref.Val) uint64 { return 1 + traverse(arg(args, 0)) + size(result) }
	case "string_replace_string_string", "string_replace_string_string_int":
		return func(args []ref.Val, result ref.Val) uint64 {
			return 1 + traverse(max(arg(args, 0), 1)*max(arg(args, 1), 1)) + size(result)
		}
	case "string_split_string", "string_split_string_int":
		return func(args []ref.Val, result ref.Val) uint64 {
			return 1 + traverse(arg(args, 0)+1) + size(result) + common.ListCreateBaseCost
		}
	case "list_join", "list_join_string":
		return func(args []ref.Val, result ref.Val) uint64 { return 1 + traverse(arg(args, 0)+1) + size(result) }
	default:
		return func([]ref.Val, ref.Val) uint64 { return 1 }
	}
}

// size is a value's size as cel-go prices it: a string's, bytes', list's
// or map's, an optional's value's, else 1.
func size(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok {
		if n, ok := s.Size().(types.Int); ok {
			return uint64(n)
		}
	}
	if o, ok := v.(*types.Optional); ok && o.HasValue() {
		return size(o.GetValue())
	}
	return 1
}
