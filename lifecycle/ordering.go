package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// OrderingMode says whether a target keeps the order of the deliveries of
// one ordering key.
type OrderingMode string

// The ordering modes.
const (
	// OrderingNone: deliveries run in parallel, within max_concurrent.
	OrderingNone OrderingMode = "none"
	// OrderingFIFO: the deliveries of one lane (the target and a message's
	// ordering key) are attempted one at a time, in the order their
	// dispatches committed.
	OrderingFIFO OrderingMode = "fifo"
)

// OrderingModes is the canonical set.
var OrderingModes = []OrderingMode{OrderingNone, OrderingFIFO}

// UnmarshalText accepts only a canonical mode.
func (m *OrderingMode) UnmarshalText(text []byte) error {
	return unmarshalText("ordering mode", text, OrderingModes, m)
}

// OnFailure says what a lane does when its head fails for good.
type OnFailure string

// The failure policies of a lane.
const (
	// OnFailureBlock keeps the lane blocked behind its failed head until an
	// operator redelivers or skips it.
	OnFailureBlock OnFailure = "block"
	// OnFailureContinue lets the next delivery go.
	OnFailureContinue OnFailure = "continue"
)

// OnFailures is the canonical set.
var OnFailures = []OnFailure{OnFailureBlock, OnFailureContinue}

// UnmarshalText accepts only a canonical policy.
func (f *OnFailure) UnmarshalText(text []byte) error {
	return unmarshalText("on_failure", text, OnFailures, f)
}

// Ordering is a target's ordering policy.
type Ordering struct {
	// Mode is none (the default) or fifo.
	Mode OrderingMode `json:"mode"`
	// OnFailure is block (the default) or continue; it applies to fifo.
	OnFailure OnFailure `json:"on_failure"`
	// HeadAlertAfter, when set, raises the alert lane_blocked once a lane's
	// head has kept deliveries waiting behind it this long. From 1 s.
	HeadAlertAfter Duration `json:"head_alert_after,omitempty"`
}

// FIFO reports whether the policy keeps lanes.
func (o Ordering) FIFO() bool { return o.Mode == OrderingFIFO }

// WithDefaults fills the unset fields: mode none, on_failure block.
func (o Ordering) WithDefaults() Ordering {
	if o.Mode == "" {
		o.Mode = OrderingNone
	}
	if o.OnFailure == "" {
		o.OnFailure = OnFailureBlock
	}
	return o
}

// Validate checks the policy's fields.
func (o Ordering) Validate() error {
	var errs []error
	if _, err := parse("ordering mode", string(o.Mode), OrderingModes); err != nil {
		errs = append(errs, &FieldError{Field: "ordering.mode", Problem: err.Error()})
	}
	if _, err := parse("on_failure", string(o.OnFailure), OnFailures); err != nil {
		errs = append(errs, &FieldError{Field: "ordering.on_failure", Problem: err.Error()})
	}
	if o.HeadAlertAfter != 0 && o.HeadAlertAfter < Duration(time.Second) {
		errs = append(errs, &FieldError{Field: "ordering.head_alert_after",
			Problem: fmt.Sprintf("must be at least 1s when set, got %s", o.HeadAlertAfter)})
	}
	return errors.Join(errs...)
}

// LaneSettled reports whether a lane's head in state s lets the next
// delivery of its lane go: once delivered, skipped or superseded, and once
// failed when the lane's policy is continue. Every other state holds the
// lane.
func LaneSettled(s DeliveryState, onFailure OnFailure) bool {
	switch s {
	case StateDelivered, StateSkipped, StateSuperseded:
		return true
	case StateFailed:
		return onFailure == OnFailureContinue
	}
	return false
}

// MaxOrderingKeyLength bounds a message's ordering key, in bytes.
const MaxOrderingKeyLength = 200

// CheckOrderingKey accepts "" (no ordering) or 1 to 200 bytes of UTF-8
// text without control characters.
func CheckOrderingKey(field, key string) error {
	if len(key) > MaxOrderingKeyLength {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be 1 to %d bytes, got %d", MaxOrderingKeyLength, len(key))}
	}
	return checkText(field, key)
}

// MaxMessageTypeLength bounds a message's type, in bytes.
const MaxMessageTypeLength = 255

// CheckMessageType accepts "" (no type) or 1 to 255 bytes of A-Z, a-z,
// 0-9 and . _ : / -, such as invoice.created: the event types providers
// name their webhooks by, and nothing a route pattern or a log would need
// to escape.
func CheckMessageType(field, t string) error {
	if t == "" {
		return nil
	}
	if len(t) > MaxMessageTypeLength {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be 1 to %d bytes, got %d", MaxMessageTypeLength, len(t))}
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:/-", c) >= 0) {
			return &FieldError{Field: field, Problem: fmt.Sprintf("must be made of A-Z, a-z, 0-9 and . _ : / - only, got %q at byte %d", c, i)}
		}
	}
	return nil
}
