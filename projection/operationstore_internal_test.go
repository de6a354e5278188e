package projection

import (
	"slices"
	"testing"

	"github.com/google/uuid"
)

func TestInLaneOrder(t *testing.T) {
	t.Parallel()
	m := make([]uuid.UUID, 6)
	for i := range m {
		m[i] = uuid.New()
	}
	place := func(message int, seq int64) lanePlace { return lanePlace{message: m[message], seq: seq} }
	for _, tt := range []struct {
		name  string
		ids   []int
		lanes map[LaneID][]lanePlace
		want  []int
	}{
		{"no lane", []int{0, 1, 2}, nil, []int{0, 1, 2}},
		{"in order already", []int{0, 1, 2}, map[LaneID][]lanePlace{{"t", "k"}: {place(0, 1), place(1, 2), place(2, 3)}}, []int{0, 1, 2}},
		{"a lane the other way round, around a message of none",
			[]int{0, 1, 2}, map[LaneID][]lanePlace{{"t", "k"}: {place(2, 7), place(0, 9)}}, []int{2, 1, 0}},
		{"two keys, each in its own places",
			[]int{0, 1, 2, 3}, map[LaneID][]lanePlace{{"t", "a"}: {place(2, 1), place(0, 2)}, {"t", "b"}: {place(3, 4), place(1, 5)}},
			[]int{2, 3, 0, 1}},
		{"one key in two targets' lanes that agree",
			[]int{0, 1, 2}, map[LaneID][]lanePlace{{"t", "k"}: {place(1, 1), place(2, 2)}, {"u", "k"}: {place(0, 1), place(1, 2)}},
			[]int{0, 1, 2}},
		{"two lanes that disagree: the list decides",
			[]int{0, 1}, map[LaneID][]lanePlace{{"t", "k"}: {place(0, 1), place(1, 2)}, {"u", "k"}: {place(1, 1), place(0, 2)}},
			[]int{0, 1}},
		{"a chain across lanes",
			[]int{0, 1, 2}, map[LaneID][]lanePlace{{"t", "k"}: {place(2, 1), place(1, 2)}, {"u", "k"}: {place(1, 1), place(0, 2)}},
			[]int{2, 1, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ids := make([]uuid.UUID, len(tt.ids))
			for i, n := range tt.ids {
				ids[i] = m[n]
			}
			want := make([]uuid.UUID, len(tt.want))
			for i, n := range tt.want {
				want[i] = m[n]
			}
			lanes := map[LaneID][]lanePlace{}
			for id, l := range tt.lanes {
				lanes[id] = slices.Clone(l)
			}
			if got := inLaneOrder(ids, lanes); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}
