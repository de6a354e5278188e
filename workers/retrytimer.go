package workers

import (
	"container/heap"
	"slices"
	"sync"
	"time"
)

// retryTimer calls fire when a retry its worker recorded comes due, so the
// worker claims it then, by a catch-up, rather than waiting for the sweep,
// which steps in only lifecycle.WakeGrace later. It keeps the due times, not
// the jobs: the catch-up claims whatever is due, oldest first. One
// time.Timer, set for the earliest, serves them all, however many there are.
type retryTimer struct {
	now  func() time.Time
	fire func()

	mu    sync.Mutex
	due   dueTimes
	timer *time.Timer
	// at is what the timer is set for; zero when it is not set.
	at      time.Time
	stopped bool
}

func newRetryTimer(now func() time.Time, fire func()) *retryTimer {
	return &retryTimer{now: now, fire: fire}
}

// add schedules a wake-up at each of the times; once stopped, it only
// keeps them, for left.
func (t *retryTimer) add(times ...time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, at := range times {
		heap.Push(&t.due, at)
	}
	if !t.stopped && len(t.due) > 0 && (t.at.IsZero() || t.due[0].Before(t.at)) {
		t.set(t.due[0])
	}
}

// retryRecheck is the longest the timer goes without reading the clock
// again, so it follows a clock that does not run as the timer's does (a
// wall clock set forward, a test's clock advanced): such a retry is claimed
// within retryRecheck of coming due, still inside lifecycle.WakeGrace.
const retryRecheck = time.Second

// set sets the timer for at, read by the injected clock, or for
// retryRecheck when at is further off.
func (t *retryTimer) set(at time.Time) {
	t.at = at
	d := min(at.Sub(t.now()), retryRecheck)
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.expire)
		return
	}
	t.timer.Reset(d)
}

// expire drops the times that have come, sets the timer for the next, and
// fires when any came.
func (t *retryTimer) expire() {
	t.mu.Lock()
	now, came := t.now(), false
	for len(t.due) > 0 && !t.due[0].After(now) {
		heap.Pop(&t.due)
		came = true
	}
	t.at = time.Time{}
	if len(t.due) > 0 && !t.stopped {
		t.set(t.due[0])
	}
	t.mu.Unlock()
	if came {
		t.fire()
	}
}

// stop ends the wake-ups.
func (t *retryTimer) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

// left returns the times still to come, for the worker that takes over
// from a stopped one; the sweep wakes them if none does.
func (t *retryTimer) left() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.due)
}

// dueTimes is a min-heap of times.
type dueTimes []time.Time

func (h dueTimes) Len() int           { return len(h) }
func (h dueTimes) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h dueTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueTimes) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *dueTimes) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
