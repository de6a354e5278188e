package service_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/waybill/waybill/service"
)

type fake struct {
	name string
	log  *[]string
	fail bool
}

func (f *fake) Start(context.Context) error {
	if f.fail {
		return errors.New("no")
	}
	*f.log = append(*f.log, "start "+f.name)
	return nil
}

func (f *fake) Stop(context.Context) { *f.log = append(*f.log, "stop "+f.name) }

// TestListStopsInReverseWhatStarted: a deferred function runs in its
// place among the stops, once.
func TestListStopsInReverseWhatStarted(t *testing.T) {
	var log []string
	var l service.List
	for _, name := range []string{"a", "b"} {
		if err := l.Start(t.Context(), name, &fake{name: name, log: &log}); err != nil {
			t.Fatal(err)
		}
	}
	l.Defer(func() { log = append(log, "deferred") })
	err := l.Start(t.Context(), "c", &fake{name: "c", log: &log, fail: true})
	if err == nil || err.Error() != "start c: no" {
		t.Fatalf("failed start: %v", err)
	}
	l.Stop(t.Context())
	l.Stop(t.Context())
	if want := []string{"start a", "start b", "deferred", "stop b", "stop a"}; !slices.Equal(log, want) {
		t.Errorf("got %v, want %v", log, want)
	}
}

func TestBaseDefaults(t *testing.T) {
	b := service.Base{}.WithDefaults()
	if b.Now == nil || b.Logger == nil {
		t.Errorf("defaults not filled: %+v", b)
	}
}

func TestLoopStartsOnceAndStopWaitsForIt(t *testing.T) {
	t.Parallel()
	l := service.NewLoop()
	if err := l.Begin("part"); err != nil {
		t.Fatal(err)
	}
	if err := l.Begin("part"); err == nil || err.Error() != "part: Start after Start or Stop" {
		t.Fatalf("a second Begin: %v", err)
	}
	ended := make(chan struct{})
	l.Go(func(ctx context.Context) {
		<-ctx.Done()
		close(ended)
	})
	l.Stop(t.Context())
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before the goroutine ended")
	}
	l.Stop(t.Context()) // twice

	never := service.NewLoop()
	never.Stop(t.Context()) // without Begin
	if err := never.Begin("part"); err == nil {
		t.Fatal("Begin after Stop")
	}

	failed := service.NewLoop()
	if err := failed.Begin("part"); err != nil {
		t.Fatal(err)
	}
	failed.Abandon()
	failed.Stop(t.Context()) // returns: nothing to wait for
}

// TestRecovered: a panic in a round of work is its error, which names it
// and is ErrPanicked; a round that returns is left as it returned.
func TestRecovered(t *testing.T) {
	round := func(f func() error) (err error) {
		defer service.Recovered(slog.New(slog.DiscardHandler), "pass", &err)
		return f()
	}
	if err := round(func() error { panic("a bug") }); !errors.Is(err, service.ErrPanicked) || err.Error() != "pass panicked: a bug" {
		t.Errorf("a panic: %v", err)
	}
	failed := errors.New("no database")
	if err := round(func() error { return failed }); err != failed {
		t.Errorf("an error: %v", err)
	}
	if err := round(func() error { return nil }); err != nil {
		t.Errorf("a success: %v", err)
	}
}
