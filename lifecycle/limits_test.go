package lifecycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

func TestRateDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rate  lifecycle.Rate
		burst int
		err   string
	}{
		{lifecycle.Rate{PerSecond: 10}, 10, ""},
		{lifecycle.Rate{PerSecond: 0.5}, 1, ""},
		{lifecycle.Rate{PerSecond: 2.5}, 3, ""},
		{lifecycle.Rate{PerSecond: 10, Burst: 50}, 50, ""},
		{lifecycle.Rate{PerSecond: 10000}, 10000, ""},
		{lifecycle.Rate{}, 0, "rate.per_second: must be above 0 and at most 10000, got 0"},
		{lifecycle.Rate{PerSecond: -1, Burst: 1}, 1, "rate.per_second: must be above 0"},
		{lifecycle.Rate{PerSecond: 10001}, 10001, "rate.per_second: must be above 0 and at most 10000, got 10001"},
		{lifecycle.Rate{PerSecond: 1, Burst: -2}, -2, "rate.burst: must be from 1 to 100000, got -2"},
		{lifecycle.Rate{PerSecond: 1, Burst: 100001}, 100001, "rate.burst: must be from 1 to 100000"},
	} {
		r := c.rate.WithDefaults()
		if r.Burst != c.burst {
			t.Errorf("%+v: burst %d, want %d", c.rate, r.Burst, c.burst)
		}
		err := r.Validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%+v: %v", c.rate, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%+v: %v, want %q", c.rate, err, c.err)
		}
	}
}

func TestTargetRateIsChecked(t *testing.T) {
	t.Parallel()
	tg := lifecycle.Target{Name: "a", Kind: "http", Rate: &lifecycle.Rate{PerSecond: 4}}.WithDefaults()
	if tg.Rate.Burst != 4 {
		t.Errorf("burst %d, want 4", tg.Rate.Burst)
	}
	if err := tg.Validate(); err != nil {
		t.Error(err)
	}
	tg.Rate = &lifecycle.Rate{PerSecond: 0, Burst: 0}
	if err := tg.Validate(); err == nil || !strings.Contains(err.Error(), "rate.per_second") || !strings.Contains(err.Error(), "rate.burst") {
		t.Errorf("a rate of 0: %v", err)
	}
}

func TestBucketAndAllowance(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	r := lifecycle.Rate{PerSecond: 10, Burst: 5}
	for _, c := range []struct {
		b    lifecycle.Bucket
		want float64
	}{
		{lifecycle.Bucket{}, 5},
		{lifecycle.Bucket{Tokens: 0, At: now}, 0},
		{lifecycle.Bucket{Tokens: 0, At: now.Add(-100 * time.Millisecond)}, 1},
		{lifecycle.Bucket{Tokens: 2, At: now.Add(-time.Hour)}, 5},
		{lifecycle.Bucket{Tokens: 1, At: now.Add(time.Second)}, 1}, // a clock behind refills nothing
	} {
		if got := r.Tokens(c.b, now); got != c.want {
			t.Errorf("%+v: %g tokens, want %g", c.b, got, c.want)
		}
	}
	if got := r.NextToken(0.5, now); !got.Equal(now.Add(50 * time.Millisecond)) {
		t.Errorf("next token from 0.5: %v", got.Sub(now))
	}
	if got := r.NextToken(1, now); !got.Equal(now) {
		t.Errorf("next token from 1: %v", got.Sub(now))
	}
	for _, c := range []struct {
		t               lifecycle.Target
		limited         bool
		inFlight        int
		tokens          float64
		want, allowance int
	}{
		{lifecycle.Target{}, false, 50, 0, 5, 5},
		{lifecycle.Target{MaxConcurrent: 2}, true, 0, 0, 5, 2},
		{lifecycle.Target{MaxConcurrent: 2}, true, 2, 0, 5, 0},
		{lifecycle.Target{MaxConcurrent: 2}, true, 3, 0, 5, 0},
		{lifecycle.Target{Rate: &r}, true, 40, 2.9, 5, 2},
		{lifecycle.Target{MaxConcurrent: 10, Rate: &r}, true, 0, 2.9, 5, 2},
		{lifecycle.Target{MaxConcurrent: 10, Rate: &r}, true, 9, 2.9, 5, 1},
		{lifecycle.Target{MaxConcurrent: 10, Rate: &r}, true, 0, 0.99, 5, 0},
	} {
		if got := c.t.Limited(); got != c.limited {
			t.Errorf("%+v: limited %t, want %t", c.t, got, c.limited)
		}
		if got := c.t.LimitsAllowance(c.inFlight, c.tokens, c.want); got != c.allowance {
			t.Errorf("%+v with %d in flight, %g tokens, want %d: %d, want %d", c.t, c.inFlight, c.tokens, c.want, got, c.allowance)
		}
	}
}
