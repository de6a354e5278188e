package commands

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestOnlyTheProbesOutcomeDecidesAHalfOpenBreaker: of the outcomes a
// batch records while a target's breaker is half-open, only the probe's
// (the attempt whose lease end targets_admit recorded as probe_until)
// closes or opens the breaker again; an attempt claimed before the
// breaker opened and ended since decides nothing.
func TestOnlyTheProbesOutcomeDecidesAHalfOpenBreaker(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	probeLease := now.Add(30*time.Second + 1234*time.Nanosecond)
	probe, late := uuid.New(), uuid.New()
	cfg := &configState{targets: map[string]lifecycle.Target{"web": {Name: "web", Enabled: true, Health: lifecycle.DefaultHealth()}}}
	halfOpen := projection.TargetHealth{Target: "web", Breaker: lifecycle.HealthHalfOpen, Since: now.Add(-time.Second),
		ProbeUntil: probeLease.Truncate(time.Microsecond)}
	outcome := func(d uuid.UUID, ok bool) journal.Event {
		o := lifecycle.Outcome{Kind: lifecycle.OutcomeDelivered}
		if !ok {
			o = lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, RetryAt: now.Add(time.Second)}
		}
		return journal.Event{Target: "web", DeliveryID: d, Payload: &journal.DeliveryAttempted{Outcome: o}}
	}
	leases := map[uuid.UUID]time.Time{probe: probeLease, late: now.Add(20 * time.Second)}
	for _, c := range []struct {
		name   string
		health projection.TargetHealth
		events []journal.Event
		want   []healthStep
	}{
		{"the late attempt's success", halfOpen, []journal.Event{outcome(late, true)}, nil},
		{"the late attempt's failure", halfOpen, []journal.Event{outcome(late, false)}, nil},
		{"the probe's success", halfOpen, []journal.Event{outcome(probe, true)},
			[]healthStep{{target: "web", probe: true, ok: true, delivery: probe}}},
		{"the probe's failure beside a late success", halfOpen, []journal.Event{outcome(late, true), outcome(probe, false)},
			[]healthStep{{target: "web", probe: true, delivery: probe}}},
		{"no probe out", projection.TargetHealth{Target: "web", Breaker: lifecycle.HealthHalfOpen}, []journal.Event{outcome(late, true)}, nil},
	} {
		got := healthSteps([]projection.TargetHealth{c.health}, c.events, leases, cfg, now)
		if len(got) != len(c.want) {
			t.Errorf("%s: steps %+v, want %+v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: step %+v, want %+v", c.name, got[i], c.want[i])
			}
		}
	}
}
