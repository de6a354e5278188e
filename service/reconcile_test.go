package service_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/waybill/waybill/service"
)

// TestReconciler: the first sync is the start's; later ones come every
// period and at once after a poke; a first sync that fails starts nothing.
func TestReconciler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		syncs := make(chan struct{}, 10)
		r := service.NewReconciler("test", time.Minute, slog.New(slog.DiscardHandler), func(context.Context) error {
			syncs <- struct{}{}
			return nil
		})
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(syncs) != 1 {
			t.Fatalf("%d syncs after Start, want 1", len(syncs))
		}
		r.Poke()
		r.Poke()
		synctest.Wait()
		if len(syncs) > 3 || len(syncs) < 2 {
			t.Fatalf("%d syncs after two pokes, want 2 or 3", len(syncs))
		}
		for len(syncs) > 0 {
			<-syncs
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(syncs) != 1 {
			t.Fatalf("%d syncs in a period, want 1", len(syncs))
		}
		r.Stop(t.Context())
		r.Stop(t.Context())
		if err := r.Start(t.Context()); err == nil {
			t.Error("Start after Stop succeeded")
		}
	})

	failed := service.NewReconciler("test", time.Minute, slog.New(slog.DiscardHandler), func(context.Context) error {
		return errors.New("no database")
	})
	if err := failed.Start(t.Context()); err == nil {
		t.Fatal("Start succeeded with a failing sync")
	}
	failed.Stop(t.Context())
}

// TestReconcilerRetriesAFailedSync: a sync that fails, or panics, is tried
// again after a second, then two, and once one succeeds the period is back.
func TestReconcilerRetriesAFailedSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Duration
		start := time.Now()
		fail := 0
		r := service.NewReconciler("test", time.Minute, slog.New(slog.DiscardHandler), func(context.Context) error {
			at = append(at, time.Since(start))
			switch {
			case fail == 2:
				fail--
				panic("a bug")
			case fail > 0:
				fail--
				return errors.New("no database")
			}
			return nil
		})
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		fail = 2
		r.Poke()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		r.Stop(t.Context())
		want := []time.Duration{0, 0, time.Second, 3 * time.Second, 63 * time.Second}
		if !slices.Equal(at, want) {
			t.Errorf("syncs at %v, want %v", at, want)
		}
	})
}
