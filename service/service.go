// Package service gives the long-running parts of a Waybill process (the
// runtime and its workers, the sweeper, the alerter, the event stream, the
// feed's consumers, the HTTP server) one shape: Start sets a part going and
// returns once it is ready or has failed to be; Stop ends it, waits for it
// within its context, and may be called twice, or without a Start. Each
// part is made with a Base, so one process has one clock and one logger,
// and `waybill serve` starts its parts as a List and stops them in reverse.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Service is a long-running part of a process.
type Service interface {
	// Start sets the service going and returns once it is ready, or the
	// reason it could not be. ctx bounds the start only.
	Start(ctx context.Context) error
	// Stop ends the service and waits for it while ctx lasts. It is safe
	// to call twice, and before or without Start.
	Stop(ctx context.Context)
}

// Base is what every service and the Writer are made with.
type Base struct {
	// Now is the clock. Give every part of a process the same one, so that
	// a due time one part writes is the time another reads. Nil is
	// time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults fills what b leaves unset.
func (b Base) WithDefaults() Base {
	if b.Now == nil {
		b.Now = time.Now
	}
	if b.Logger == nil {
		b.Logger = slog.Default()
	}
	return b
}

// List starts services in order and stops them in the reverse order, so
// that nothing stops before what depends on it.
type List struct {
	mu      sync.Mutex
	started []named
}

type named struct {
	name string
	s    Service
}

// Start starts s, named for errors, after those started before it. When it
// fails, Start returns the error and the services started so far keep
// running until Stop.
func (l *List) Start(ctx context.Context, name string, s Service) error {
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	l.mu.Lock()
	l.started = append(l.started, named{name, s})
	l.mu.Unlock()
	return nil
}

// Stop stops every service started, the last first, each within ctx.
func (l *List) Stop(ctx context.Context) {
	l.mu.Lock()
	started := l.started
	l.started = nil
	l.mu.Unlock()
	for i := len(started) - 1; i >= 0; i-- {
		started[i].s.Stop(ctx)
	}
}
