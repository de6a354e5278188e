package lifecycle

import (
	"errors"
	"time"
)

// OutcomeKind is what one attempt at a delivery came to.
type OutcomeKind string

// The outcome kinds.
const (
	OutcomeDelivered   OutcomeKind = "delivered"
	OutcomeAwaitingAck OutcomeKind = "awaiting_ack"
	OutcomeRetry       OutcomeKind = "retry"
	OutcomeFailed      OutcomeKind = "failed"
)

// OutcomeKinds is the canonical set.
var OutcomeKinds = []OutcomeKind{OutcomeDelivered, OutcomeAwaitingAck, OutcomeRetry, OutcomeFailed}

// UnmarshalText accepts only a canonical outcome kind.
func (k *OutcomeKind) UnmarshalText(text []byte) error {
	return unmarshalText("outcome kind", text, OutcomeKinds, k)
}

// Outcome is the result of one attempt as a target reports it. A target never
// writes a state; the fold turns the outcome into one.
type Outcome struct {
	Kind OutcomeKind `json:"kind"`
	// Text says what happened, for the history: a response line, a reason.
	Text string `json:"text,omitempty"`
	// RetryAt is when a retry is due; only for OutcomeRetry.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Deadline is when an awaited receipt is overdue; only for OutcomeAwaitingAck.
	Deadline time.Time `json:"deadline,omitzero"`
	// ExternalID is the receiver's own id for the message, taken from its
	// answer by the target's receipt.correlate; only for
	// OutcomeAwaitingAck, and optional. (A target's Deliverer reports it
	// with OutcomeDelivered; the receipt policy turns that into a
	// hand-over.)
	ExternalID string `json:"external_id,omitempty"`
	// Gone is a failure for good whose receiver said it is gone for good
	// (HTTP 410): recording it disables the target too. Not journaled with
	// the outcome: the target's own event, target.disabled, records it.
	Gone bool `json:"-"`
	// StatusCode is the HTTP status of the answer the attempt got, 0 when
	// it got none (a file target, an error before the answer). Not
	// journaled: Text holds the status line.
	StatusCode int `json:"-"`
	// Hold, when set, is the receiver's request that the whole target be
	// left alone for a while. Not journaled with the outcome: the
	// target's target.throttled records it.
	Hold *Hold `json:"-"`
}

// Hold is a receiver's request, answered with Status (Throttles) and a
// Retry-After, that its target be left alone until Until.
type Hold struct {
	Until  time.Time
	Status int
}

// Delivered is a successful attempt.
func Delivered(text string) Outcome { return Outcome{Kind: OutcomeDelivered, Text: text} }

// AwaitingAck is a hand-over whose receipt is owed by deadline.
func AwaitingAck(text string, deadline time.Time) Outcome {
	return Outcome{Kind: OutcomeAwaitingAck, Text: text, Deadline: deadline}
}

// Retry is a failure for now, due again at.
func Retry(at time.Time, reason string) Outcome {
	return Outcome{Kind: OutcomeRetry, Text: reason, RetryAt: at}
}

// Failed is a failure for good.
func Failed(reason string) Outcome { return Outcome{Kind: OutcomeFailed, Text: reason} }

// Gone is a failure for good that disables the target: its receiver is
// gone for good.
func Gone(reason string) Outcome { return Outcome{Kind: OutcomeFailed, Text: reason, Gone: true} }

// State is the delivery state the outcome leads to.
func (o Outcome) State() DeliveryState {
	switch o.Kind {
	case OutcomeDelivered:
		return StateDelivered
	case OutcomeAwaitingAck:
		return StateAwaitingAck
	case OutcomeRetry:
		return StateRetrying
	}
	return StateFailed
}

// Validate checks that the outcome carries exactly the fields its kind needs.
func (o Outcome) Validate() error {
	var errs []error
	if _, err := parse("outcome.kind", string(o.Kind), OutcomeKinds); err != nil {
		return &FieldError{Field: "outcome.kind", Problem: err.Error()}
	}
	if (o.Kind == OutcomeAwaitingAck) != !o.Deadline.IsZero() {
		errs = append(errs, &FieldError{Field: "outcome.deadline", Problem: "is required for awaiting_ack and allowed for no other kind"})
	}
	if (o.Kind == OutcomeRetry) != !o.RetryAt.IsZero() {
		errs = append(errs, &FieldError{Field: "outcome.retry_at", Problem: "is required for retry and allowed for no other kind"})
	}
	if o.ExternalID != "" {
		if o.Kind != OutcomeAwaitingAck {
			errs = append(errs, &FieldError{Field: "outcome.external_id", Problem: "is allowed for awaiting_ack only"})
		} else if err := CheckExternalID("outcome.external_id", o.ExternalID); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Gone && o.Kind != OutcomeFailed {
		errs = append(errs, &FieldError{Field: "outcome.gone", Problem: "is allowed for failed only"})
	}
	if (o.Kind == OutcomeRetry || o.Kind == OutcomeFailed) && o.Text == "" {
		errs = append(errs, &FieldError{Field: "outcome.text", Problem: "must give the reason of a retry or a failure"})
	}
	return errors.Join(errs...)
}

// ErrorCode is an error's text as those who may not read a remote
// server's words see it (senders, receipt tokens, the callbacks a sender
// chose): "HTTP 503" for the answer of a remote server, whose text starts
// with its status (targets.HTTPOutcome), else "withheld".
func ErrorCode(text string) string {
	if len(text) >= 3 && text[0] >= '1' && text[0] <= '5' && isDigits(text[:3]) &&
		(len(text) == 3 || text[3] == ' ' || text[3] == ':' || text[3] == ';') {
		return "HTTP " + text[:3]
	}
	return "withheld"
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
