package lifecycle_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

func TestBreakerTripsAndCoolsDown(t *testing.T) {
	t.Parallel()
	b := lifecycle.DefaultBreaker()
	for _, c := range []struct {
		requests, failures int
		trips              bool
	}{
		{9, 9, false},  // under min_requests
		{10, 4, false}, // under the rate
		{10, 5, true},  // at the rate
		{20, 19, true},
		{0, 0, false},
	} {
		if got := b.Trips(c.requests, c.failures); got != c.trips {
			t.Errorf("%d of %d failed: trips %v, want %v", c.failures, c.requests, got, c.trips)
		}
	}
	for _, c := range []struct{ last, next time.Duration }{
		{0, 30 * time.Second}, {30 * time.Second, time.Minute}, {8 * time.Minute, 10 * time.Minute}, {10 * time.Minute, 10 * time.Minute},
	} {
		if got := b.NextCooldown(c.last); got != c.next {
			t.Errorf("after %s: %s, want %s", c.last, got, c.next)
		}
	}
}

func TestHealthReadsDefaultsAndNulls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in           string
		breakerOff   bool
		window       time.Duration
		disableNever bool
	}{
		{`{}`, false, time.Minute, false},
		{`{"breaker": null}`, true, 0, false},
		{`{"breaker": {"window": "30s"}, "disable_after": null}`, false, 30 * time.Second, true},
	} {
		var h lifecycle.Health
		if err := json.Unmarshal([]byte(c.in), &h); err != nil {
			t.Fatal(err)
		}
		if (h.Breaker == nil) != c.breakerOff || (h.DisableAfter == nil) != c.disableNever {
			t.Errorf("%s: %+v", c.in, h)
			continue
		}
		if h.Breaker != nil && (h.Breaker.Window.D() != c.window || h.Breaker.MinRequests != 10) {
			t.Errorf("%s: breaker %+v", c.in, *h.Breaker)
		}
		if err := h.Validate(); err != nil {
			t.Errorf("%s: %v", c.in, err)
		}
	}
	var h lifecycle.Health
	if err := json.Unmarshal([]byte(`{"breaker": {"failure_rate": 1.5, "cooldown": "20m"}, "disable_after": "0s"}`), &h); err != nil {
		t.Fatal(err)
	}
	err := h.Validate()
	for _, field := range []string{"health.breaker.failure_rate", "health.breaker.cooldown", "health.disable_after"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("no error naming %s: %v", field, err)
		}
	}
}

func TestGateAllowance(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		gate lifecycle.Gate
		want int
	}{
		{"closed", lifecycle.Gate{Breaker: lifecycle.HealthClosed}, 5},
		{"no row", lifecycle.Gate{}, 5},
		{"open", lifecycle.Gate{Breaker: lifecycle.HealthOpen}, 0},
		{"throttled", lifecycle.Gate{Breaker: lifecycle.HealthClosed, ThrottledUntil: now.Add(time.Second)}, 0},
		{"throttle over", lifecycle.Gate{Breaker: lifecycle.HealthClosed, ThrottledUntil: now}, 5},
		{"half-open", lifecycle.Gate{Breaker: lifecycle.HealthHalfOpen}, 1},
		{"half-open, probe out", lifecycle.Gate{Breaker: lifecycle.HealthHalfOpen, ProbeUntil: now.Add(time.Second)}, 0},
		{"half-open, probe's lease over", lifecycle.Gate{Breaker: lifecycle.HealthHalfOpen, ProbeUntil: now}, 1},
	} {
		if got := c.gate.Allowance(now, 5); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
