package lifecycle

import "time"

// dispatchBackoff is the wait after each unclaimed wake-up: the first follows
// the dispatch itself, and the last repeats when MaxDispatches is raised.
var dispatchBackoff = []time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// DispatchBackoff is how long after its n-th unclaimed wake-up (n from 1) a
// delivery is due to be woken again. With the default of five wake-ups a
// delivery nobody claims is woken at 0 s, 10 s, 40 s, 2 min 40 s and
// 12 min 40 s, and stalls at 22 min 40 s.
func DispatchBackoff(n int) time.Duration {
	i := min(max(n, 1), len(dispatchBackoff)) - 1
	return dispatchBackoff[i]
}
