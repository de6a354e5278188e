package lifecycle

import (
	"errors"
	"fmt"
	"time"
)

// OperationAction is what a bulk operation does to each message it
// matched.
type OperationAction string

// The actions of bulk operations.
const (
	// ActionRedeliver queues again the current generation's deliveries
	// that failed or stalled (those to the filter's target, when it names
	// one).
	ActionRedeliver OperationAction = "redeliver"
	// ActionSkip settles without sending the current generation's
	// deliveries that may be skipped (those to the filter's target, when
	// it names one).
	ActionSkip OperationAction = "skip"
	// ActionResend sends the message again as a new generation, to the
	// targets of the current one.
	ActionResend OperationAction = "resend"
	// ActionReplay sends the message again as a new generation, to the
	// targets the routes match now.
	ActionReplay OperationAction = "replay"
)

// OperationActions is the canonical set.
var OperationActions = []OperationAction{ActionRedeliver, ActionResend, ActionReplay, ActionSkip}

// UnmarshalText accepts only a canonical action.
func (a *OperationAction) UnmarshalText(text []byte) error {
	return unmarshalText("action", text, OperationActions, a)
}

// OperationState is where a bulk operation is: running until it has taken
// every message it matched (done), an operator cancelled it, or it met
// what it cannot go on from (failed).
type OperationState string

// The states of bulk operations.
const (
	OperationRunning   OperationState = "running"
	OperationDone      OperationState = "done"
	OperationCancelled OperationState = "cancelled"
	OperationFailed    OperationState = "failed"
)

// OperationStates is the canonical set.
var OperationStates = []OperationState{OperationRunning, OperationDone, OperationCancelled, OperationFailed}

// Label is the state as the console shows it.
func (s OperationState) Label() string {
	switch s {
	case OperationRunning:
		return "Running"
	case OperationDone:
		return "Done"
	case OperationCancelled:
		return "Cancelled"
	case OperationFailed:
		return "Failed"
	}
	return string(s)
}

// UnmarshalText accepts only a canonical state.
func (s *OperationState) UnmarshalText(text []byte) error {
	return unmarshalText("operation state", text, OperationStates, s)
}

// OperationFilter chooses the messages of a bulk operation, as the
// messages list chooses them: any of the statuses, a delivery to the
// target (of any generation), the source, and created_at strictly between
// the two times. The zero value of a field leaves it out; at least one
// must be given.
type OperationFilter struct {
	Status        []MessageStatus `json:"status,omitempty"`
	Target        string          `json:"target,omitempty"`
	Source        string          `json:"source,omitempty"`
	CreatedAfter  time.Time       `json:"created_after,omitzero"`
	CreatedBefore time.Time       `json:"created_before,omitzero"`
}

// Empty reports whether the filter leaves every message in.
func (f OperationFilter) Empty() bool {
	return len(f.Status) == 0 && f.Target == "" && f.Source == "" && f.CreatedAfter.IsZero() && f.CreatedBefore.IsZero()
}

// Validate checks every field and returns all problems joined, each named
// as the field of an operation's filter ("filter.status[1]").
func (f OperationFilter) Validate() error {
	const prefix = "filter."
	var errs []error
	if f.Empty() {
		errs = append(errs, &FieldError{Field: "filter",
			Problem: "must name at least one of status, target, source, created_after, created_before: an operation on every message is refused; created_before set to now takes them all"})
	}
	seen := map[MessageStatus]bool{}
	for i, s := range f.Status {
		field := fmt.Sprintf("%sstatus[%d]", prefix, i)
		if _, err := ParseMessageStatus(string(s)); err != nil {
			errs = append(errs, &FieldError{Field: field, Problem: err.Error()})
		} else if seen[s] {
			errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf("%s is given twice", s)})
		}
		seen[s] = true
	}
	if f.Target != "" {
		errs = append(errs, CheckName(prefix+"target", f.Target))
	}
	if f.Source != "" {
		errs = append(errs, CheckName(prefix+"source", f.Source))
	}
	errs = append(errs, checkYear(prefix+"created_after", f.CreatedAfter), checkYear(prefix+"created_before", f.CreatedBefore))
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		errs = append(errs, &FieldError{Field: prefix + "created_before", Problem: "must be after created_after"})
	}
	return errors.Join(errs...)
}

// OperationSettings pace the bulk operations.
type OperationSettings struct {
	// Rate is how many messages per second the bulk operations take
	// together, so that live traffic keeps flowing. Default 200, from 1 to
	// 100,000.
	Rate int `json:"rate"`
}

// The bounds of OperationSettings.Rate.
const (
	DefaultOperationRate = 200
	MinOperationRate     = 1
	MaxOperationRate     = 100_000
)

// ParseOperationAction returns s as an action, or an error listing the
// actions.
func ParseOperationAction(s string) (OperationAction, error) {
	return parse("action", s, OperationActions)
}

// The bounds of a bulk operation.
const (
	// MaxOperationMessages is the most messages one operation takes: a
	// filter that matches more is refused, to be narrowed.
	MaxOperationMessages = 1_000_000
	// MaxReasonLength bounds an operation's reason, which each of its
	// actions journals.
	MaxReasonLength = 1000
)

// checkYear refuses a time whose year in UTC is past what RFC 3339, and so
// the journal's JSON, can write: an offset can carry 9999-12-31T23:00-05:00
// into the year 10000.
func checkYear(field string, t time.Time) error {
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must fall in the years 0000 to 9999 in UTC, got %s", t.UTC().Format("2006-01-02T15:04:05Z"))}
	}
	return nil
}
