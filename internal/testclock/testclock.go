// Package testclock is the injected clock of tests: time moves only when a
// test advances it.
package testclock

import (
	"sync"
	"time"
)

// Clock is a settable time, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock set to t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// AfterFirstRead returns a clock whose first reading is first and every
// reading after it later: time that passes inside a command, between two
// of its readings.
func AfterFirstRead(first, later time.Time) func() time.Time {
	var (
		mu    sync.Mutex
		reads int
	)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if reads++; reads == 1 {
			return first
		}
		return later
	}
}
