package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Health is how a target's receiver is spared while it is sick: the
// breaker that stops the attempts to it while most of them fail, and how
// long a receiver may fail without a success before its target is
// disabled. Decided once for the whole cluster (commands, health.go).
type Health struct {
	// Breaker, when set, opens on a window's failure rate; null turns it
	// off. Default DefaultBreaker.
	Breaker *Breaker `json:"breaker"`
	// DisableAfter, when set, disables a target whose attempts have all
	// failed for that long; null never. Default DefaultDisableAfter.
	DisableAfter *Duration `json:"disable_after"`

	// The figures an answer of the API shows beside the policy, never
	// stored nor journaled, and ignored in a request: the state since
	// Since (until Until, for an open breaker or a hold), the breaker's
	// window's failure rate, since when every attempt failed, and how
	// many deliveries are held.
	State        HealthState `json:"state,omitempty"`
	Since        time.Time   `json:"since,omitzero"`
	Until        time.Time   `json:"until,omitzero"`
	FailureRate  *float64    `json:"failure_rate,omitempty"`
	FailingSince time.Time   `json:"failing_since,omitzero"`
	Held         *int        `json:"held,omitempty"`
}

// Breaker is a target's circuit breaker. It is closed until, within
// Window, at least MinRequests attempts ended and at least FailureRate of
// them failed; it is then open, and no attempt is made, for Cooldown; then
// half-open, letting one attempt through: its success closes the breaker,
// its failure opens it again for twice the last cooldown, up to
// MaxCooldown.
type Breaker struct {
	Window      Duration `json:"window"`
	MinRequests int      `json:"min_requests"`
	FailureRate float64  `json:"failure_rate"`
	Cooldown    Duration `json:"cooldown"`
	MaxCooldown Duration `json:"max_cooldown"`
}

// The defaults and bounds of Health.
const (
	DefaultDisableAfter = 120 * time.Hour
	MaxBreakerWindow    = time.Hour
	MaxBreakerCooldown  = 24 * time.Hour
	MaxMinRequests      = 100000
	MaxDisableAfter     = 8760 * time.Hour
)

// DefaultBreaker is the breaker of a target that names none.
func DefaultBreaker() Breaker {
	return Breaker{Window: Duration(time.Minute), MinRequests: 10, FailureRate: 0.5,
		Cooldown: Duration(30 * time.Second), MaxCooldown: Duration(10 * time.Minute)}
}

// DefaultHealth is the health of a target that names none.
func DefaultHealth() *Health {
	b, after := DefaultBreaker(), Duration(DefaultDisableAfter)
	return &Health{Breaker: &b, DisableAfter: &after}
}

// UnmarshalJSON reads a health object whose absent fields take their
// defaults (a breaker's absent fields too), and whose null ones are off.
// It refuses unknown fields but for the figures an answer shows beside
// the policy (State and the rest), which a definition read and sent back
// carries, and which are ignored.
func (h *Health) UnmarshalJSON(data []byte) error {
	def := DefaultHealth()
	var p struct {
		Breaker      *Breaker  `json:"breaker"`
		DisableAfter *Duration `json:"disable_after"`
		// The answer's figures, ignored.
		State        json.RawMessage `json:"state"`
		Since        json.RawMessage `json:"since"`
		Until        json.RawMessage `json:"until"`
		FailureRate  json.RawMessage `json:"failure_rate"`
		FailingSince json.RawMessage `json:"failing_since"`
		Held         json.RawMessage `json:"held"`
	}
	p.Breaker, p.DisableAfter = def.Breaker, def.DisableAfter
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	*h = Health{Breaker: p.Breaker, DisableAfter: p.DisableAfter}
	return nil
}

// Validate checks every field and returns all problems joined.
func (h Health) Validate() error {
	var errs []error
	if b := h.Breaker; b != nil {
		if b.Window < Duration(time.Second) || b.Window.D() > MaxBreakerWindow {
			errs = append(errs, &FieldError{Field: "health.breaker.window", Problem: "must be from 1s to 1h"})
		}
		if b.MinRequests < 1 || b.MinRequests > MaxMinRequests {
			errs = append(errs, &FieldError{Field: "health.breaker.min_requests",
				Problem: fmt.Sprintf("must be from 1 to %d, got %d", MaxMinRequests, b.MinRequests)})
		}
		if !(b.FailureRate > 0 && b.FailureRate <= 1) {
			errs = append(errs, &FieldError{Field: "health.breaker.failure_rate",
				Problem: fmt.Sprintf("must be above 0 and at most 1, got %g", b.FailureRate)})
		}
		if b.Cooldown < Duration(time.Second) || b.Cooldown > b.MaxCooldown {
			errs = append(errs, &FieldError{Field: "health.breaker.cooldown", Problem: "must be from 1s to max_cooldown"})
		}
		if b.MaxCooldown.D() > MaxBreakerCooldown {
			errs = append(errs, &FieldError{Field: "health.breaker.max_cooldown", Problem: "must be at most 24h"})
		}
	}
	if d := h.DisableAfter; d != nil && (*d < Duration(time.Second) || d.D() > MaxDisableAfter) {
		errs = append(errs, &FieldError{Field: "health.disable_after", Problem: "must be from 1s to 8760h, or null for never"})
	}
	return errors.Join(errs...)
}

// Trips reports whether a window in which requests attempts ended,
// failures of them failed, opens the breaker.
func (b Breaker) Trips(requests, failures int) bool {
	return requests >= b.MinRequests && float64(failures) >= b.FailureRate*float64(requests)
}

// NextCooldown is the cooldown of an opening that follows a failed probe
// after a cooldown of last: twice it, up to MaxCooldown; the first
// opening's (last zero) is Cooldown.
func (b Breaker) NextCooldown(last time.Duration) time.Duration {
	if last <= 0 {
		return b.Cooldown.D()
	}
	return min(2*last, b.MaxCooldown.D())
}

// HealthState is the state of a target's health, as the API shows it.
type HealthState string

// The health states.
const (
	// HealthClosed: attempts are made as they come due.
	HealthClosed HealthState = "closed"
	// HealthOpen: the breaker holds every attempt until its cooldown ends.
	HealthOpen HealthState = "open"
	// HealthHalfOpen: one attempt, the probe, may go.
	HealthHalfOpen HealthState = "half_open"
	// HealthThrottled: the receiver asked to be left alone until a time.
	HealthThrottled HealthState = "throttled"
	// HealthDisabled: the target is disabled.
	HealthDisabled HealthState = "disabled"
)

// Fails reports whether an attempt that ended with the outcome counts as
// a failure in a breaker's window: a failure for now (a timeout among
// them) or for good.
func (o Outcome) Fails() bool { return o.Kind == OutcomeRetry || o.Kind == OutcomeFailed }

// Throttles reports whether a receiver's answer with the status code and a
// Retry-After holds its whole target until then: 429 and 503, and 502 and
// 504 as the Standard Webhooks specification recommends.
func Throttles(status int) bool {
	return status == 429 || status == 502 || status == 503 || status == 504
}

// Gate is what a target's health says of its claims: its breaker's state
// (closed, open or half_open), the end of its receiver's hold, and the end
// of the lease of a half-open breaker's probe.
type Gate struct {
	Breaker        HealthState
	ThrottledUntil time.Time
	ProbeUntil     time.Time
}

// Allowance is how many of want claims the gate lets through at now: none
// while the breaker is open or the receiver's hold runs, one while it is
// half-open and no probe is out, else all. A delivery it keeps from its
// claim is held: not attempted, not woken, not stalled.
func (g Gate) Allowance(now time.Time, want int) int {
	switch {
	case g.Breaker == HealthOpen || now.Before(g.ThrottledUntil):
		return 0
	case g.Breaker == HealthHalfOpen && now.Before(g.ProbeUntil):
		return 0
	case g.Breaker == HealthHalfOpen:
		return min(want, 1)
	}
	return want
}

// GateAllowanceSQL is Allowance in SQL, on the target_health row h (the
// columns breaker, throttled_until and probe_until, NULL for a zero time)
// at the timestamptz now for the int want: every statement that holds
// deliveries by their target's gate is built from it, so SQL and Go agree
// (a test compares them).
func GateAllowanceSQL(h, now, want string) string {
	return fmt.Sprintf(`CASE WHEN %[1]s.breaker = 'open' OR %[1]s.throttled_until > %[2]s THEN 0 `+
		`WHEN %[1]s.breaker = 'half_open' AND %[1]s.probe_until > %[2]s THEN 0 `+
		`WHEN %[1]s.breaker = 'half_open' THEN least(%[3]s, 1) ELSE %[3]s END`, h, now, want)
}
