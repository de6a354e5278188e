package lifecycle

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// A target's limits hold its claims across every process: at most
// MaxConcurrent attempts in flight (InFlightRule), and, with a Rate, no
// more claims than its token bucket holds tokens. A target with neither is
// unlimited: its claims count nothing and take no lock alone.

// Rate bounds how often attempts to a target start, across every
// process: a token bucket that holds at most Burst tokens and gains
// PerSecond of them each second; a claim takes one.
type Rate struct {
	// PerSecond is the rate on average; above 0, at most MaxRatePerSecond.
	PerSecond float64 `json:"per_second"`
	// Burst is how many claims may go at once over the rate. Default
	// ceil(PerSecond), at least 1; at most MaxRateBurst.
	Burst int `json:"burst"`
}

// The bounds of a Rate.
const (
	MaxRatePerSecond = 10000
	MaxRateBurst     = 100000
)

// WithDefaults fills a Burst left at zero.
func (r Rate) WithDefaults() Rate {
	if r.Burst == 0 && r.PerSecond > 0 {
		r.Burst = max(1, int(math.Ceil(min(r.PerSecond, MaxRateBurst))))
	}
	return r
}

// Validate checks both fields and returns all problems joined.
func (r Rate) Validate() error {
	var errs []error
	if !(r.PerSecond > 0 && r.PerSecond <= MaxRatePerSecond) {
		errs = append(errs, &FieldError{Field: "rate.per_second",
			Problem: fmt.Sprintf("must be above 0 and at most %d, got %g", MaxRatePerSecond, r.PerSecond)})
	}
	if r.Burst < 1 || r.Burst > MaxRateBurst {
		errs = append(errs, &FieldError{Field: "rate.burst",
			Problem: fmt.Sprintf("must be from 1 to %d, got %d", MaxRateBurst, r.Burst)})
	}
	return errors.Join(errs...)
}

// Bucket is a target's token bucket as the last claim left it: Tokens at
// At. A target without one has a full bucket.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// Tokens is what the bucket b holds at now: refilled at the rate since
// b.At, never past Burst; a clock read before b.At refills nothing.
func (r Rate) Tokens(b Bucket, now time.Time) float64 {
	if b.At.IsZero() {
		return float64(r.Burst)
	}
	return min(float64(r.Burst), b.Tokens+r.PerSecond*max(0, now.Sub(b.At).Seconds()))
}

// NextToken is when a bucket that holds tokens at now holds a whole one:
// now when it does.
func (r Rate) NextToken(tokens float64, now time.Time) time.Time {
	if tokens >= 1 {
		return now
	}
	return now.Add(time.Duration(math.Ceil((1 - tokens) / r.PerSecond * float64(time.Second))))
}

// Limited reports whether t has a limit across the cluster: a
// max_concurrent or a rate.
func (t Target) Limited() bool { return t.MaxConcurrent > 0 || t.Rate != nil }

// LimitsAllowance is how many of want claims the limits of t let through
// with inFlight attempts in flight and tokens in its bucket (read only
// with a rate): want for an unlimited target. A delivery it keeps from its
// claim is held, as by the gate.
func (t Target) LimitsAllowance(inFlight int, tokens float64, want int) int {
	n := want
	if t.MaxConcurrent > 0 {
		n = min(n, t.MaxConcurrent-inFlight)
	}
	if t.Rate != nil {
		n = min(n, int(math.Floor(tokens)))
	}
	return max(0, n)
}

// LimitedSQL is Limited in SQL over spec, a target's stored definition
// (jsonb): every statement that decides by it is built from it, so SQL and
// Go agree (a test compares them).
func LimitedSQL(spec string) string {
	return fmt.Sprintf(`(coalesce((%[1]s->>'max_concurrent')::int, 0) > 0 OR %[2]s)`, spec, RatedSQL(spec))
}

// RatedSQL is whether the target of the stored definition spec (jsonb)
// has a rate (Target.Rate set), in SQL.
func RatedSQL(spec string) string {
	return fmt.Sprintf(`jsonb_typeof(%s->'rate') IS NOT DISTINCT FROM 'object'`, spec)
}

// LimitsAllowanceSQL is LimitsAllowance in SQL over the target's stored
// definition spec (jsonb), the int expressions inFlight and want and the
// float8 tokens (NULL without a rate).
func LimitsAllowanceSQL(spec, inFlight, tokens, want string) string {
	return fmt.Sprintf(`greatest(0, least(%[4]s, coalesce(nullif((%[1]s->>'max_concurrent')::int, 0) - %[2]s, %[4]s), `+
		`coalesce(floor(%[3]s)::int, %[4]s)))`, spec, inFlight, tokens, want)
}

// RateTokensSQL is Rate.Tokens in SQL, for the rate of the stored
// definition spec (jsonb), the bucket's tokens and at (NULL for a target
// without a bucket), at the timestamptz now; NULL without a rate.
func RateTokensSQL(spec, tokens, at, now string) string {
	return fmt.Sprintf(`CASE WHEN jsonb_typeof(%[1]s->'rate') IS DISTINCT FROM 'object' THEN NULL `+
		`WHEN %[3]s IS NULL THEN (%[1]s->'rate'->>'burst')::float8 `+
		`ELSE least((%[1]s->'rate'->>'burst')::float8, %[2]s + (%[1]s->'rate'->>'per_second')::float8 * `+
		`greatest(0, extract(epoch FROM %[4]s - %[3]s)::float8)) END`, spec, tokens, at, now)
}
