package projection

import (
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/routing"
)

// TestSameRoutingLeavesTheClockOut: a route whose filter the time limit
// stopped, in the decision recorded or in the audit's, is not compared,
// whatever the other made of it; every other route still is.
func TestSameRoutingLeavesTheClockOut(t *testing.T) {
	slow, other := uuid.New(), uuid.New()
	stopped := []journal.FilterError{{Route: slow, Error: "operation cancelled: time limit of " + routing.TimeLimit.String() + " exceeded"}}
	matched := func(ids ...uuid.UUID) []journal.MatchedRoute {
		var out []journal.MatchedRoute
		for _, id := range ids {
			out = append(out, journal.MatchedRoute{ID: id, Target: "alpha"})
		}
		return out
	}
	for _, c := range []struct {
		name     string
		recorded journal.Routing
		now      journal.Routing
		same     bool
	}{
		{"stopped then, matched now", journal.Routing{FilterErrors: stopped}, journal.Routing{Routes: matched(slow)}, true},
		{"matched then, stopped now", journal.Routing{Routes: matched(slow, other)}, journal.Routing{Routes: matched(other), FilterErrors: stopped}, true},
		{"stopped both times", journal.Routing{FilterErrors: stopped}, journal.Routing{FilterErrors: stopped}, true},
		{"another route differs", journal.Routing{FilterErrors: stopped, Routes: matched(other)}, journal.Routing{Routes: matched(slow)}, false},
		{"another error", journal.Routing{FilterErrors: []journal.FilterError{{Route: slow, Error: "no such key: amount"}}},
			journal.Routing{Routes: matched(slow)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sameRouting(c.recorded, c.now); got != c.same {
				t.Errorf("sameRouting = %v, want %v", got, c.same)
			}
		})
	}
}
