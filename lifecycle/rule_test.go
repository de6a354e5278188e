package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRuleHolds(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	past, future := now.Add(-time.Second), now.Add(time.Second)
	tests := []struct {
		rule Rule
		f    Facts
		want bool
	}{
		{ClaimRule, Facts{State: StateQueued, NextDue: future}, true},
		{ClaimRule, Facts{State: StateStalled}, true},
		{ClaimRule, Facts{State: StateRetrying, NextDue: past}, true},
		{ClaimRule, Facts{State: StateRetrying, NextDue: now}, true},
		{ClaimRule, Facts{State: StateRetrying, NextDue: future}, false},
		{ClaimRule, Facts{State: StateRetrying, NextDue: future, DispatchCount: 1}, true},
		{ClaimRule, Facts{State: StateDelivering, LeaseEnd: past}, false},
		{ClaimRule, Facts{State: StateFailed}, false},
		{LeaseExpiryRule, Facts{State: StateDelivering, LeaseEnd: now}, true},
		{LeaseExpiryRule, Facts{State: StateDelivering, LeaseEnd: future}, false},
		{LeaseExpiryRule, Facts{State: StateRetrying, LeaseEnd: past}, false},
		{CatchUpRule, Facts{State: StateDelivering, LeaseEnd: past}, true},
		{CatchUpRule, Facts{State: StateQueued}, true},
		{WakeRule, Facts{State: StateQueued, NextDue: past}, true},
		{WakeRule, Facts{State: StateQueued, NextDue: future}, false},
		{WakeRule, Facts{State: StateQueued}, false},
		{WakeRule, Facts{State: StateAwaitingAck, NextDue: past}, false},
		{SweepWakeRule, Facts{State: StateQueued, NextDue: now}, true},
		{SweepWakeRule, Facts{State: StateRetrying, NextDue: past}, false},
		{SweepWakeRule, Facts{State: StateRetrying, NextDue: now.Add(-WakeGrace)}, true},
		{SweepWakeRule, Facts{State: StateRetrying, NextDue: now.Add(-WakeGrace), DispatchCount: 1}, true},
		{SweepWakeRule, Facts{State: StateRetrying}, false},
		{WaitRule, Facts{State: StateQueued, NextDue: future}, true},
		{WaitRule, Facts{State: StateRetrying, NextDue: now}, false},
		{WaitRule, Facts{State: StateRetrying}, false},
		{WaitRule, Facts{State: StateAwaitingAck, NextDue: future}, false},
		{ReceiptTimeoutRule, Facts{State: StateAwaitingAck, NextDue: past}, true},
		{ReceiptTimeoutRule, Facts{State: StateAwaitingAck, NextDue: future}, false},
		{RedeliverRule, Facts{State: StateDelivered}, true},
		{DueRule, Facts{State: StateScheduled, NextDue: now}, true},
		{DueRule, Facts{State: StateScheduled, NextDue: future}, false},
		{DueRule, Facts{State: StateQueued, NextDue: past}, false},
		{ClaimRule, Facts{State: StateScheduled, NextDue: past}, false},
		{WakeRule, Facts{State: StateScheduled, NextDue: past}, false},
		{SkipRule, Facts{State: StateScheduled, NextDue: future}, true},
		{RedeliverRule, Facts{State: StateAwaitingAck}, false},
	}
	for _, tt := range tests {
		if got := tt.rule.Holds(tt.f, now); got != tt.want {
			t.Errorf("%s.Holds(%+v) = %v, want %v", tt.rule.Name, tt.f, got, tt.want)
		}
	}
}

// TestWakeAndWaitSplitTheirStates: a delivery in WakeRule's states with a
// next_due is in exactly one of WakeRule and WaitRule at any time, which
// the count of due deliveries relies on.
func TestWakeAndWaitSplitTheirStates(t *testing.T) {
	if !slices.Equal(WakeRule.States(), WaitRule.States()) {
		t.Fatalf("WakeRule's states %v, WaitRule's %v", WakeRule.States(), WaitRule.States())
	}
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, s := range WakeRule.States() {
		for _, due := range []time.Time{now.Add(-time.Second), now, now.Add(time.Microsecond), now.Add(time.Hour)} {
			f := Facts{State: s, NextDue: due}
			if WakeRule.Holds(f, now) == WaitRule.Holds(f, now) {
				t.Errorf("%s due %s: both or neither", s, due)
			}
		}
	}
}

// TestSweepWakesOnlyWhatIsDue: whatever the sweep wakes, the fold lets it
// wake.
func TestSweepWakesOnlyWhatIsDue(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, s := range DeliveryStates {
		for _, due := range []time.Time{{}, now.Add(-time.Hour), now.Add(-WakeGrace), now.Add(-time.Second), now, now.Add(time.Second)} {
			for _, woken := range []int{0, 1} {
				f := Facts{State: s, NextDue: due, DispatchCount: woken}
				if SweepWakeRule.Holds(f, now) && !WakeRule.Holds(f, now) {
					t.Errorf("%+v: the sweep wakes what is not due", f)
				}
			}
		}
	}
}

func TestRuleSQL(t *testing.T) {
	for _, tt := range []struct {
		rule Rule
		want string
	}{
		{ClaimRule, `d.state IN ('queued', 'stalled', 'retrying') AND (d.state IN ('queued', 'stalled') OR d.state = 'retrying' AND (d.next_due <= $2 OR d.dispatch_count > 0))`},
		{LeaseExpiryRule, `d.state IN ('delivering') AND (d.state = 'delivering' AND (d.lease_end <= $2))`},
		{RedeliverRule, `d.state IN ('retrying', 'failed', 'stalled', 'delivered', 'skipped')`},
		{SweepWakeRule, `d.state IN ('queued', 'retrying') AND (d.state = 'queued' AND (d.next_due <= $2) OR d.state = 'retrying' AND (d.next_due <= $2::timestamptz - interval '2000000 microseconds'))`},
	} {
		if got := tt.rule.SQL("d", "$2"); got != tt.want {
			t.Errorf("%s.SQL =\n%s\nwant\n%s", tt.rule.Name, got, tt.want)
		}
	}
	if got := WakeRule.SQL("", "now()"); strings.Contains(got, ".") {
		t.Errorf("no alias: %s", got)
	}
}

func TestOrRefusesASharedState(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Or of two rules sharing a state did not panic")
		}
	}()
	ClaimRule.Or("both", WakeRule)
}

// TestStatusRanksCoverEveryState: every delivery state decides the status
// in exactly one row of the ranking, so a new state cannot be forgotten;
// superseded is in none, as only an earlier generation has it and the
// status reads the current one.
func TestStatusRanksCoverEveryState(t *testing.T) {
	seen := map[DeliveryState]int{}
	for _, r := range statusRanks {
		for _, s := range r.states {
			seen[s]++
		}
	}
	for _, s := range DeliveryStates {
		want := 1
		if s == StateSuperseded {
			want = 0
		}
		if seen[s] != want {
			t.Errorf("state %s is in %d rows of the ranking", s, seen[s])
		}
	}
}

// TestMayBecomeAgreesWithDeriveStatus moves one delivery of every
// combination of up to three others from every state to every other and
// checks that whenever the status turns into one it was not, MayBecome
// said it could, and that a delivery then gives it (StatesGiving): the
// moved one, or another.
func TestMayBecomeAgreesWithDeriveStatus(t *testing.T) {
	var others [][]DeliveryState
	var grow func(prefix []DeliveryState, n int)
	grow = func(prefix []DeliveryState, n int) {
		others = append(others, slices.Clone(prefix))
		if n == 0 {
			return
		}
		for _, s := range DeliveryStates {
			grow(append(prefix, s), n-1)
		}
	}
	grow(nil, 3)
	for _, rest := range others {
		for _, old := range DeliveryStates {
			for _, next := range DeliveryStates {
				before := DeriveStatus(StageDispatched, "", append(slices.Clone(rest), old))
				after := DeriveStatus(StageDispatched, "", append(slices.Clone(rest), next))
				if before != after && !MayBecome(old, next, after) {
					t.Fatalf("%v + %s -> %s turns %s into %s, but MayBecome says it cannot", rest, old, next, before, after)
				}
				giving := StatesGiving(after)
				if before != after && !slices.Contains(giving, next) &&
					!slices.ContainsFunc(rest, func(s DeliveryState) bool { return slices.Contains(giving, s) }) {
					t.Fatalf("%v + %s -> %s turns %s into %s with no delivery in %v", rest, old, next, before, after, giving)
				}
			}
		}
	}
}

func TestLaneSettled(t *testing.T) {
	for _, s := range DeliveryStates {
		for _, f := range OnFailures {
			want := s == StateDelivered || s == StateSkipped || s == StateSuperseded || s == StateFailed && f == OnFailureContinue
			if got := LaneSettled(s, f); got != want {
				t.Errorf("LaneSettled(%s, %s) = %v, want %v", s, f, got, want)
			}
		}
	}
}
