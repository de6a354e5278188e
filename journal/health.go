package journal

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// The events of a target's health stream (TargetStream): its breaker's
// openings, half-openings and closings, and the receiver's requests to be
// left alone. Each is decided once for the whole cluster
// (commands, health.go).

// targetPrefix starts the name of a target's health stream, which a
// message id, an operation's stream and the named streams never do.
const targetPrefix = "target:"

// TargetStream is the stream of one target's health.
func TargetStream(target string) string { return targetPrefix + target }

// TargetOf returns the target whose health stream is stream; false for
// any other stream.
func TargetOf(stream string) (string, bool) {
	return strings.CutPrefix(stream, targetPrefix)
}

// Health reports whether events of the kind belong to a target's health
// stream (TargetStream).
func (k Kind) Health() bool {
	return k == KindBreakerOpened || k == KindBreakerHalfOpened || k == KindBreakerClosed || k == KindTargetThrottled
}

// Message reports whether events of the kind belong to a message's
// stream.
func (k Kind) Message() bool { return k.Stream() == "" && !k.Operation() && !k.Health() }

// BreakerOpened: the target's breaker opened, on Requests attempts ended
// within Window of which Failures failed (none for a probe that failed),
// and holds every attempt until Until, Cooldown from the opening.
type BreakerOpened struct {
	Target   string             `json:"target"`
	Requests int                `json:"requests"`
	Failures int                `json:"failures"`
	Window   lifecycle.Duration `json:"window"`
	Cooldown lifecycle.Duration `json:"cooldown"`
	Until    time.Time          `json:"until"`
	// Probe is set when the half-open breaker's probe failed.
	Probe bool `json:"probe,omitempty"`
}

func (*BreakerOpened) Kind() Kind { return KindBreakerOpened }
func (p *BreakerOpened) Text() string {
	if p.Probe {
		return fmt.Sprintf("breaker of %s opened again: the probe failed; attempts held until %s (%s)", p.Target, stamp(p.Until), p.Cooldown)
	}
	return fmt.Sprintf("breaker of %s opened: %d of %s failed within %s; attempts held until %s (%s)",
		p.Target, p.Failures, lifecycle.Count(p.Requests, "attempt", "attempts"), p.Window, stamp(p.Until), p.Cooldown)
}
func (p *BreakerOpened) Validate() error {
	var errs []error
	if p.Failures < 0 || p.Requests < p.Failures {
		errs = append(errs, field("failures", fmt.Sprintf("must be from 0 to requests (%d), got %d", p.Requests, p.Failures)))
	}
	if p.Cooldown <= 0 {
		errs = append(errs, field("cooldown", "must be positive"))
	}
	return errors.Join(append(errs, lifecycle.CheckName("target", p.Target), required("until", !p.Until.IsZero()))...)
}

// BreakerHalfOpened: the open breaker's cooldown ended; one attempt, the
// probe, may go.
type BreakerHalfOpened struct {
	Target string `json:"target"`
}

func (*BreakerHalfOpened) Kind() Kind { return KindBreakerHalfOpened }
func (p *BreakerHalfOpened) Text() string {
	return fmt.Sprintf("breaker of %s half-open: one attempt may go", p.Target)
}
func (p *BreakerHalfOpened) Validate() error { return lifecycle.CheckName("target", p.Target) }

// BreakerClosed: the breaker closed, by its probe's success (DeliveryID)
// or by an operator (none); attempts go as they come due.
type BreakerClosed struct {
	Target     string    `json:"target"`
	DeliveryID uuid.UUID `json:"delivery_id,omitzero"`
}

func (*BreakerClosed) Kind() Kind { return KindBreakerClosed }
func (p *BreakerClosed) Text() string {
	if p.DeliveryID == uuid.Nil {
		return fmt.Sprintf("breaker of %s closed by hand", p.Target)
	}
	return fmt.Sprintf("breaker of %s closed: the probe, delivery %s, succeeded", p.Target, p.DeliveryID)
}
func (p *BreakerClosed) Validate() error { return lifecycle.CheckName("target", p.Target) }

// TargetThrottled: the receiver answered StatusCode with a Retry-After to
// the attempt of DeliveryID, and no attempt to the target is made until
// Until.
type TargetThrottled struct {
	Target     string    `json:"target"`
	Until      time.Time `json:"until"`
	StatusCode int       `json:"status_code"`
	DeliveryID uuid.UUID `json:"delivery_id"`
}

func (*TargetThrottled) Kind() Kind { return KindTargetThrottled }
func (p *TargetThrottled) Text() string {
	return fmt.Sprintf("target %s throttled until %s: its receiver answered %d to delivery %s", p.Target, stamp(p.Until), p.StatusCode, p.DeliveryID)
}
func (p *TargetThrottled) Validate() error {
	var status error
	if !lifecycle.Throttles(p.StatusCode) {
		status = field("status_code", fmt.Sprintf("must be 429, 502, 503 or 504, got %d", p.StatusCode))
	}
	return errors.Join(lifecycle.CheckName("target", p.Target), required("until", !p.Until.IsZero()), status,
		required("delivery_id", p.DeliveryID != uuid.Nil))
}
