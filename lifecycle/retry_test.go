package lifecycle

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fields lists the fields of every *FieldError in a (possibly joined, possibly
// nested) error, in order.
func fields(err error) []string {
	if fe, ok := err.(*FieldError); ok {
		return []string{fe.Field}
	}
	var out []string
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			out = append(out, fields(e)...)
		}
	}
	return out
}

func policy(strategy RetryStrategy, base, ceiling time.Duration) RetryPolicy {
	return RetryPolicy{Strategy: strategy, BaseDelay: Duration(base), MaxDelay: Duration(ceiling)}.WithDefaults()
}

func TestRetryDelay(t *testing.T) {
	const s, m = time.Second, time.Minute
	tests := []struct {
		name     string
		strategy RetryStrategy
		base     time.Duration
		ceiling  time.Duration
		n        int
		want     time.Duration
	}{
		{"fixed first", RetryFixed, 10 * s, time.Hour, 1, 10 * s},
		{"fixed later", RetryFixed, 10 * s, time.Hour, 7, 10 * s},
		{"fixed capped", RetryFixed, 10 * s, 10 * s, 3, 10 * s},
		{"linear first", RetryLinear, 10 * s, time.Hour, 1, 10 * s},
		{"linear third", RetryLinear, 10 * s, time.Hour, 3, 30 * s},
		{"linear at the cap", RetryLinear, 10 * s, m, 6, m},
		{"linear past the cap", RetryLinear, 10 * s, m, 7, m},
		{"linear huge n", RetryLinear, 10 * s, m, 1 << 62, m},
		{"exponential first", RetryExponential, 10 * s, time.Hour, 1, 10 * s},
		{"exponential second", RetryExponential, 10 * s, time.Hour, 2, 20 * s},
		{"exponential fifth", RetryExponential, 10 * s, time.Hour, 5, 160 * s},
		{"exponential at the cap", RetryExponential, 10 * s, 160 * s, 5, 160 * s},
		{"exponential past the cap", RetryExponential, 10 * s, 100 * s, 5, 100 * s},
		{"exponential n 1000", RetryExponential, 10 * s, time.Hour, 1000, time.Hour},
		{"exponential n 1000 huge cap", RetryExponential, time.Millisecond, time.Duration(1<<63 - 1), 1000, time.Duration(1<<63 - 1)},
		{"exponential 64 doublings", RetryExponential, 1, time.Duration(1<<63 - 1), 64, time.Duration(1<<63 - 1)},
		{"exponential 63 doublings fit", RetryExponential, 1, time.Duration(1<<63 - 1), 63, 1 << 62},
		{"n below 1 is the first", RetryExponential, 10 * s, time.Hour, 0, 10 * s},
		{"base above the cap", RetryExponential, 2 * m, m, 1, m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(tt.strategy, tt.base, tt.ceiling)
			if got := p.Delay(tt.n); got != tt.want {
				t.Errorf("Delay(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
	if got := (RetryPolicy{Strategy: RetryLinear}).Delay(3); got != 0 {
		t.Errorf("Delay of an unset policy = %v, want 0", got)
	}
}

func TestRetryDelayNeverDecreasesOrPassesTheCap(t *testing.T) {
	for _, strategy := range RetryStrategies {
		p := policy(strategy, 7*time.Millisecond, 90*time.Second)
		prev := time.Duration(0)
		for n := 1; n <= MaxRetryAttempts; n++ {
			d := p.Delay(n)
			if d < prev || d > p.MaxDelay.D() || d <= 0 {
				t.Fatalf("%s: Delay(%d) = %v after %v", strategy, n, d, prev)
			}
			prev = d
		}
	}
}

func TestRetryNext(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := created.Add(time.Hour)
	p := RetryPolicy{Strategy: RetryExponential, BaseDelay: Duration(10 * time.Second),
		MaxDelay: Duration(10 * time.Minute), Jitter: new(0.0), MaxAttempts: 5, MaxAge: Duration(24 * time.Hour)}

	t.Run("due after the delay", func(t *testing.T) {
		at, reason := p.Next(3, created, now, time.Time{}, 0)
		if reason != "" || !at.Equal(now.Add(40*time.Second)) {
			t.Errorf("Next = %v %q, want %v", at, reason, now.Add(40*time.Second))
		}
	})
	t.Run("max_attempts ends it", func(t *testing.T) {
		at, reason := p.Next(5, created, now, time.Time{}, 0)
		if !at.IsZero() || !strings.Contains(reason, "retry.max_attempts") {
			t.Errorf("Next after the last attempt = %v %q", at, reason)
		}
		if _, reason := p.Next(4, created, now, time.Time{}, 0); reason != "" {
			t.Errorf("the attempt before the last ends it: %q", reason)
		}
	})
	t.Run("max_age ends it", func(t *testing.T) {
		late := created.Add(24*time.Hour - 30*time.Second)
		at, reason := p.Next(3, created, late, time.Time{}, 0)
		if !at.IsZero() || !strings.Contains(reason, "retry.max_age") {
			t.Errorf("Next past max_age = %v %q", at, reason)
		}
		onTime := created.Add(24*time.Hour - 40*time.Second)
		if at, reason := p.Next(3, created, onTime, time.Time{}, 0); reason != "" || !at.Equal(created.Add(24*time.Hour)) {
			t.Errorf("Next exactly at max_age = %v %q", at, reason)
		}
	})
	t.Run("Retry-After later than the delay is honoured", func(t *testing.T) {
		after := now.Add(3 * time.Minute)
		if at, reason := p.Next(1, created, now, after, 0); reason != "" || !at.Equal(after) {
			t.Errorf("Next = %v %q, want %v", at, reason, after)
		}
	})
	t.Run("Retry-After earlier than the delay is not", func(t *testing.T) {
		if at, _ := p.Next(3, created, now, now.Add(time.Second), 0); !at.Equal(now.Add(40 * time.Second)) {
			t.Errorf("Next = %v, want %v", at, now.Add(40*time.Second))
		}
		if at, _ := p.Next(1, created, now, now.Add(-time.Hour), 0); !at.Equal(now.Add(10 * time.Second)) {
			t.Errorf("Retry-After in the past: Next = %v", at)
		}
	})
	t.Run("Retry-After is capped at max_delay", func(t *testing.T) {
		if at, reason := p.Next(1, created, now, now.Add(5*time.Hour), 0); reason != "" || !at.Equal(now.Add(10*time.Minute)) {
			t.Errorf("Next = %v %q, want %v", at, reason, now.Add(10*time.Minute))
		}
	})
	t.Run("Retry-After past max_age ends it", func(t *testing.T) {
		late := created.Add(24*time.Hour - time.Minute)
		if _, reason := p.Next(1, created, late, late.Add(5*time.Minute), 0); !strings.Contains(reason, "retry.max_age") {
			t.Errorf("reason %q", reason)
		}
	})
}

func TestRetryNextJitter(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := RetryPolicy{Strategy: RetryFixed, BaseDelay: Duration(100 * time.Second),
		MaxDelay: Duration(time.Hour), Jitter: new(0.2), MaxAttempts: 10, MaxAge: Duration(72 * time.Hour)}
	for _, tt := range []struct {
		spread float64
		want   time.Duration
	}{
		{-1, 80 * time.Second},
		{-0.5, 90 * time.Second},
		{0, 100 * time.Second},
		{0.5, 110 * time.Second},
		{1, 120 * time.Second},
		{-7, 80 * time.Second}, // out of range is clamped
		{7, 120 * time.Second},
	} {
		at, reason := p.Next(1, created, created, time.Time{}, tt.spread)
		if reason != "" || at.Sub(created) != tt.want {
			t.Errorf("spread %g: wait %v %q, want %v", tt.spread, at.Sub(created), reason, tt.want)
		}
	}
	for i := range 2001 {
		spread := float64(i)/1000 - 1
		at, _ := p.Next(1, created, created, time.Time{}, spread)
		if wait := at.Sub(created); wait < 80*time.Second || wait > 120*time.Second {
			t.Fatalf("spread %g: wait %v outside ±20%%", spread, wait)
		}
	}

	// At the cap jitter can only shorten the wait: max_delay bounds every wait.
	capped := p
	capped.BaseDelay, capped.MaxDelay = Duration(time.Hour), Duration(time.Hour)
	if at, _ := capped.Next(1, created, created, time.Time{}, 1); at.Sub(created) != time.Hour {
		t.Errorf("jitter above the cap: wait %v", at.Sub(created))
	}
	if at, _ := capped.Next(1, created, created, time.Time{}, -1); at.Sub(created) != 48*time.Minute {
		t.Errorf("jitter below the cap: wait %v", at.Sub(created))
	}
}

func TestRetryWithDefaults(t *testing.T) {
	got := RetryPolicy{}.WithDefaults()
	want := RetryPolicy{Strategy: RetryExponential, BaseDelay: Duration(10 * time.Second), MaxDelay: Duration(time.Hour),
		Jitter: new(0.2), MaxAttempts: 10, MaxAge: Duration(72 * time.Hour)}
	if !samePolicy(got, want) {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}

	// A policy that sets some fields keeps the default jitter; only an
	// explicit 0 turns it off.
	if p := (RetryPolicy{MaxAttempts: 3}).WithDefaults(); p.Jitter == nil || *p.Jitter != DefaultRetryJitter {
		t.Errorf("jitter with max_attempts set: %v", p.Jitter)
	}
	if p := (RetryPolicy{Jitter: new(0.0)}).WithDefaults(); *p.Jitter != 0 {
		t.Errorf("explicit jitter 0 became %g", *p.Jitter)
	}
	// A base delay above an hour raises the default cap with it.
	if p := (RetryPolicy{BaseDelay: Duration(2 * time.Hour)}).WithDefaults(); p.MaxDelay.D() != 2*time.Hour {
		t.Errorf("max_delay with a base of 2h: %v", p.MaxDelay)
	}
	set := RetryPolicy{Strategy: RetryLinear, BaseDelay: Duration(time.Second), MaxDelay: Duration(time.Minute),
		Jitter: new(0.5), MaxAttempts: 3, MaxAge: Duration(time.Hour)}
	if got := set.WithDefaults(); !samePolicy(got, set) {
		t.Errorf("WithDefaults changed a full policy: %+v", got)
	}
}

func samePolicy(a, b RetryPolicy) bool {
	if (a.Jitter == nil) != (b.Jitter == nil) || (a.Jitter != nil && *a.Jitter != *b.Jitter) {
		return false
	}
	a.Jitter, b.Jitter = nil, nil
	return a == b
}

func TestRetryValidate(t *testing.T) {
	valid := RetryPolicy{}.WithDefaults()
	tests := []struct {
		name   string
		change func(p *RetryPolicy)
		want   []string
	}{
		{"strategy", func(p *RetryPolicy) { p.Strategy = "random" }, []string{"retry.strategy"}},
		{"base_delay", func(p *RetryPolicy) { p.BaseDelay = Duration(time.Microsecond) }, []string{"retry.base_delay"}},
		{"max_delay below base", func(p *RetryPolicy) { p.MaxDelay = Duration(time.Second) }, []string{"retry.max_delay"}},
		{"jitter negative", func(p *RetryPolicy) { p.Jitter = new(-0.1) }, []string{"retry.jitter"}},
		{"jitter above 1", func(p *RetryPolicy) { p.Jitter = new(1.5) }, []string{"retry.jitter"}},
		{"jitter missing", func(p *RetryPolicy) { p.Jitter = nil }, []string{"retry.jitter"}},
		{"max_attempts 0", func(p *RetryPolicy) { p.MaxAttempts = 0 }, []string{"retry.max_attempts"}},
		{"max_attempts 1001", func(p *RetryPolicy) { p.MaxAttempts = 1001 }, []string{"retry.max_attempts"}},
		{"max_age", func(p *RetryPolicy) { p.MaxAge = Duration(time.Millisecond) }, []string{"retry.max_age"}},
		{"all at once", func(p *RetryPolicy) { *p = RetryPolicy{Strategy: "x", Jitter: new(2.0), MaxAttempts: -1} },
			[]string{"retry.strategy", "retry.base_delay", "retry.jitter", "retry.max_attempts", "retry.max_age"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := valid
			tt.change(&p)
			if got := fields(p.Validate()); !slices.Equal(got, tt.want) {
				t.Errorf("fields %v, want %v (%v)", got, tt.want, p.Validate())
			}
		})
	}
	for _, edge := range []RetryPolicy{
		{Strategy: RetryFixed, BaseDelay: Duration(time.Millisecond), MaxDelay: Duration(time.Millisecond),
			Jitter: new(0.0), MaxAttempts: 1, MaxAge: Duration(time.Second)},
		{Strategy: RetryLinear, BaseDelay: Duration(time.Second), MaxDelay: Duration(time.Hour),
			Jitter: new(1.0), MaxAttempts: MaxRetryAttempts, MaxAge: Duration(time.Hour)},
	} {
		if err := edge.Validate(); err != nil {
			t.Errorf("%+v: %v", edge, err)
		}
	}
	nan := valid
	nan.Jitter = new(math.NaN())
	if err := nan.Validate(); !slices.Equal(fields(err), []string{"retry.jitter"}) {
		t.Errorf("NaN jitter: %v", err)
	}
}
