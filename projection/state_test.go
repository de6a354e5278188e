package projection_test

import (
	"slices"
	"testing"

	"github.com/waybill/waybill/projection"
)

// TestNewestFirstAndCurrentTargets: the deliveries listed newest
// generation first, each generation in Seq order, and the targets of the
// current generation by name.
func TestNewestFirstAndCurrentTargets(t *testing.T) {
	t.Parallel()
	d := func(seq, gen int, target string) projection.Delivery {
		return projection.Delivery{Seq: seq, Generation: gen, Target: target}
	}
	for _, tc := range []struct {
		name       string
		m          projection.Message
		wantSeqs   []int
		wantTarget []string
	}{
		{"none", projection.Message{Generation: 1}, nil, nil},
		{"one generation", projection.Message{Generation: 1, Deliveries: []projection.Delivery{d(1, 1, "billing"), d(2, 1, "archive")}},
			[]int{1, 2}, []string{"archive", "billing"}},
		{"three generations", projection.Message{Generation: 3, Deliveries: []projection.Delivery{
			d(1, 1, "billing"), d(2, 1, "archive"), d(3, 2, "billing"), d(4, 2, "archive"), d(5, 3, "ledger"), d(6, 3, "billing")}},
			[]int{5, 6, 3, 4, 1, 2}, []string{"billing", "ledger"}},
		{"a replay that matched nothing", projection.Message{Generation: 2, Deliveries: []projection.Delivery{d(1, 1, "billing")}},
			[]int{1}, nil},
	} {
		var seqs []int
		for _, d := range tc.m.NewestFirst() {
			seqs = append(seqs, d.Seq)
		}
		if !slices.Equal(seqs, tc.wantSeqs) {
			t.Errorf("%s: NewestFirst gives seqs %v, want %v", tc.name, seqs, tc.wantSeqs)
		}
		if got := tc.m.CurrentTargets(); !slices.Equal(got, tc.wantTarget) {
			t.Errorf("%s: CurrentTargets %v, want %v", tc.name, got, tc.wantTarget)
		}
	}
}
