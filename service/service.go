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
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Recovered, deferred by a function that does one round of a loop's work
// (a pass, a poll, an attempt, a feed handler's call), turns a panic in it
// into its error, named by what and logged with its stack: a bug that the
// round's data may set off again fails that round alone, and the process
// and the loop go on.
func Recovered(log *slog.Logger, what string, err *error) {
	if v := recover(); v != nil {
		log.Error(what+" panicked", "panic", v, "stack", string(debug.Stack()))
		*err = fmt.Errorf("%s %w: %v", what, ErrPanicked, v)
	}
}

// ErrPanicked is in the error Recovered gives a round that panicked.
var ErrPanicked = errors.New("panicked")

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
	// Tracer makes the spans of the process's traces; nil when tracing
	// is off, and then no part makes a span, so tracing costs nothing.
	Tracer trace.Tracer
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

// Defer adds stop to be run in its place among the services' stops: for
// what is undone but does not run, such as a pool to close, a file to
// remove or a lock to release.
func (l *List) Defer(stop func()) {
	l.mu.Lock()
	l.started = append(l.started, named{"", stopFunc(stop)})
	l.mu.Unlock()
}

// stopFunc is a Service that only stops.
type stopFunc func()

func (stopFunc) Start(context.Context) error { return nil }
func (f stopFunc) Stop(context.Context)      { f() }

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

// Loop is the start and stop of a service that runs one goroutine until
// it is stopped: a service embeds it, or holds it, and its Start calls
// Begin, then Go (or Abandon when it fails before its goroutine starts);
// its Stop is Loop's.
type Loop struct {
	ctx  context.Context
	stop context.CancelFunc
	// done is closed when the goroutine has ended, or by Abandon.
	done chan struct{}

	mu               sync.Mutex
	started, stopped bool
}

// NewLoop returns a Loop that has not begun.
func NewLoop() *Loop {
	ctx, stop := context.WithCancel(context.Background())
	return &Loop{ctx: ctx, stop: stop, done: make(chan struct{})}
}

// Context is done once Stop is called: the goroutine's context.
func (l *Loop) Context() context.Context { return l.ctx }

// Begin marks the loop started, so that Stop waits for it; it fails after
// a Begin or a Stop, naming the service.
func (l *Loop) Begin(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.stopped {
		return fmt.Errorf("%s: Start after Start or Stop", name)
	}
	l.started = true
	return nil
}

// Go runs run in a goroutine with the loop's context; Stop waits for it
// to return. Call it once, after Begin.
func (l *Loop) Go(run func(ctx context.Context)) {
	go func() {
		defer close(l.done)
		run(l.ctx)
	}()
}

// Abandon ends a begun loop whose goroutine will not run: its start
// failed.
func (l *Loop) Abandon() { close(l.done) }

// Stop cancels the loop's context and waits for its goroutine while ctx
// lasts. It is safe to call twice, and before or without Begin.
func (l *Loop) Stop(ctx context.Context) {
	l.mu.Lock()
	started := l.started
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	l.mu.Unlock()
	l.stop()
	if started {
		select {
		case <-l.done:
		case <-ctx.Done():
		}
	}
}
