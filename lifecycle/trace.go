package lifecycle

import "fmt"

// The bounds of a stored trace context: a traceparent of any version the
// W3C may define yet, and the W3C's own limits of tracestate (32 members)
// and baggage (8,192 bytes).
const (
	MaxTraceParentLength = 256
	MaxTraceStateLength  = 512
	MaxBaggageLength     = 8192
)

// Trace is the W3C trace context a message belongs to, kept with it so
// that its attempts, days later and after restarts, join its trace: the
// traceparent and tracestate of its ingest (or of its sender, when
// tracing was off), and the baggage its sender gave, which a target
// passes on only when it opts in. The zero Trace is none.
type Trace struct {
	Parent  string
	State   string
	Baggage string
}

// IsZero says there is no trace context.
func (t Trace) IsZero() bool { return t == Trace{} }

// Check bounds the lengths, naming the field of each under prefix
// (prefix + "traceparent", …).
func (t Trace) Check(prefix string) error {
	for _, f := range []struct {
		name  string
		value string
		max   int
	}{
		{"traceparent", t.Parent, MaxTraceParentLength},
		{"tracestate", t.State, MaxTraceStateLength},
		{"baggage", t.Baggage, MaxBaggageLength},
	} {
		if len(f.value) > f.max {
			return &FieldError{Field: prefix + f.name, Problem: fmt.Sprintf("must be at most %d bytes, got %d", f.max, len(f.value))}
		}
	}
	if t.Parent == "" && (t.State != "" || t.Baggage != "") {
		return &FieldError{Field: prefix + "traceparent", Problem: "is required with a tracestate or baggage"}
	}
	return nil
}
