package lifecycle

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// RetryStrategy is how the wait between attempts grows.
type RetryStrategy string

// The retry strategies. After attempt n the wait is BaseDelay (fixed),
// n × BaseDelay (linear) or 2^(n-1) × BaseDelay (exponential), each capped
// at MaxDelay.
const (
	RetryFixed       RetryStrategy = "fixed"
	RetryLinear      RetryStrategy = "linear"
	RetryExponential RetryStrategy = "exponential"
)

// RetryStrategies is the canonical set.
var RetryStrategies = []RetryStrategy{RetryFixed, RetryLinear, RetryExponential}

// UnmarshalText accepts only a canonical strategy.
func (s *RetryStrategy) UnmarshalText(text []byte) error {
	return unmarshalText("retry strategy", text, RetryStrategies, s)
}

// RetryPolicy is a target's rule for attempts that failed for now: when the
// next one is due, and when to stop trying.
type RetryPolicy struct {
	// Strategy defaults to exponential.
	Strategy RetryStrategy `json:"strategy"`
	// BaseDelay is the first wait. Default 10 s; from 1 ms.
	BaseDelay Duration `json:"base_delay"`
	// MaxDelay caps every wait, a target's Retry-After included. Default
	// 1 h, or BaseDelay when that is longer; at least BaseDelay.
	MaxDelay Duration `json:"max_delay"`
	// Jitter spreads each wait by up to this fraction either way, so
	// deliveries that failed together do not retry together. Default 0.2;
	// from 0 to 1. A pointer, so that an explicit 0 (no jitter) differs
	// from a field left out.
	Jitter *float64 `json:"jitter"`
	// MaxAttempts ends the retries after this many attempts. Default 10;
	// from 1 to 1000.
	MaxAttempts int `json:"max_attempts"`
	// MaxAge ends the retries once the delivery is this old. Default 72 h;
	// from 1 s.
	MaxAge Duration `json:"max_age"`
}

// The defaults and bounds of RetryPolicy.
const (
	DefaultRetryBaseDelay   = 10 * time.Second
	DefaultRetryMaxDelay    = time.Hour
	DefaultRetryJitter      = 0.2
	DefaultRetryMaxAttempts = 10
	DefaultRetryMaxAge      = 72 * time.Hour
	MaxRetryAttempts        = 1000
)

// WithDefaults fills the fields left out.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Strategy == "" {
		p.Strategy = RetryExponential
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = Duration(DefaultRetryBaseDelay)
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = Duration(max(DefaultRetryMaxDelay, p.BaseDelay.D()))
	}
	if p.Jitter == nil {
		p.Jitter = new(DefaultRetryJitter)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultRetryMaxAttempts
	}
	if p.MaxAge == 0 {
		p.MaxAge = Duration(DefaultRetryMaxAge)
	}
	return p
}

// Validate checks every field of a policy with its defaults filled and
// returns all problems joined.
func (p RetryPolicy) Validate() error {
	var errs []error
	if _, err := parse("retry strategy", string(p.Strategy), RetryStrategies); err != nil {
		errs = append(errs, &FieldError{Field: "retry.strategy", Problem: err.Error()})
	}
	if p.BaseDelay < Duration(time.Millisecond) {
		errs = append(errs, &FieldError{Field: "retry.base_delay", Problem: fmt.Sprintf("must be at least 1ms, got %s", p.BaseDelay)})
	}
	if p.MaxDelay < p.BaseDelay {
		errs = append(errs, &FieldError{Field: "retry.max_delay",
			Problem: fmt.Sprintf("must be at least retry.base_delay (%s), got %s", p.BaseDelay, p.MaxDelay)})
	}
	switch {
	case p.Jitter == nil:
		errs = append(errs, &FieldError{Field: "retry.jitter", Problem: "is required"})
	case !(*p.Jitter >= 0 && *p.Jitter <= 1): // written so that NaN fails too
		errs = append(errs, &FieldError{Field: "retry.jitter", Problem: fmt.Sprintf("must be from 0 to 1, got %g", *p.Jitter)})
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxRetryAttempts {
		errs = append(errs, &FieldError{Field: "retry.max_attempts",
			Problem: fmt.Sprintf("must be from 1 to %d, got %d", MaxRetryAttempts, p.MaxAttempts)})
	}
	if p.MaxAge < Duration(time.Second) {
		errs = append(errs, &FieldError{Field: "retry.max_age", Problem: fmt.Sprintf("must be at least 1s, got %s", p.MaxAge)})
	}
	return errors.Join(errs...)
}

// Delay is the wait after attempt n (from 1) failed, before jitter. It is
// computed without overflow for any n, and is zero for a policy whose
// delays were never set rather than a division by zero.
func (p RetryPolicy) Delay(n int) time.Duration {
	base, ceiling := p.BaseDelay.D(), p.MaxDelay.D()
	if base <= 0 || ceiling <= 0 {
		return 0
	}
	if base >= ceiling {
		return ceiling
	}
	n = max(n, 1)
	switch p.Strategy {
	case RetryFixed:
		return base
	case RetryLinear:
		// n × base ≤ ceiling exactly when n ≤ ceiling / base (rounded
		// down); comparing that way never multiplies past the ceiling.
		if int64(n) > int64(ceiling/base) {
			return ceiling
		}
		return time.Duration(n) * base
	default:
		// base << (n-1) ≤ ceiling exactly when base ≤ ceiling >> (n-1),
		// and a shift of 63 or more leaves 0, so a huge n gives the
		// ceiling instead of wrapping.
		if base > ceiling>>(n-1) {
			return ceiling
		}
		return base << (n - 1)
	}
}

// Next decides what follows attempt n of a delivery whose budget started at
// since (when it was made, or an operator last redelivered it) and that
// failed for now at now: the time the next attempt is due, or, when a bound
// of the policy ends the retries, the reason it failed for good. after is a
// time the target asked for (an HTTP Retry-After), honoured up to MaxDelay;
// zero when none. spread is a number from -1 to 1 that scales the jitter
// (rand.Float64()*2 - 1 in production, fixed in tests).
func (p RetryPolicy) Next(n int, since, now, after time.Time, spread float64) (time.Time, string) {
	if n >= p.MaxAttempts {
		return time.Time{}, fmt.Sprintf("gave up after attempt %d: retry.max_attempts is %d", n, p.MaxAttempts)
	}
	wait := p.Delay(n)
	if p.Jitter != nil && !math.IsNaN(spread) {
		wait += time.Duration(float64(wait) * *p.Jitter * max(-1, min(1, spread)))
	}
	if !after.IsZero() {
		wait = max(wait, after.Sub(now))
	}
	wait = min(max(wait, 0), p.MaxDelay.D())
	at := now.Add(wait)
	if at.Sub(since) > p.MaxAge.D() {
		return time.Time{}, fmt.Sprintf("gave up after attempt %d: the next would be past retry.max_age (%s)", n, p.MaxAge)
	}
	return at, ""
}
