// Package testpoll is how tests wait for a state: they poll for it with a
// deadline, never sleep a fixed time and hope it came.
package testpoll

import (
	"testing"
	"time"
)

// Interval is how often Until checks its condition.
const Interval = 5 * time.Millisecond

// Timeout is how long Until waits before it fails the test: long, because
// a test that passes never waits it, and a loaded machine is slow.
const Timeout = time.Minute

// Until checks cond every Interval until it holds, and fails the test,
// naming what it waited for, when it does not hold within Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within is Until with a deadline of its own, for a wait whose work is
// known to take longer than Timeout on a loaded machine.
func Within(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(Interval)
	}
}
