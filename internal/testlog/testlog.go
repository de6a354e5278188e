// Package testlog keeps what a test's logger, or a process a test runs,
// writes, for the test to read while it is written.
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is written by several goroutines and read while it is.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is all that was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines are the lines written that hold s.
func (b *Buffer) Lines(s string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}
