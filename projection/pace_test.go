package projection

import (
	"context"
	"testing"
	"time"
)

// TestRest: the wait after a stretch of work keeps the work to its share
// of the time.
func TestRest(t *testing.T) {
	for _, c := range []struct {
		worked time.Duration
		share  float64
		want   time.Duration
	}{
		{20 * time.Millisecond, 0.5, 20 * time.Millisecond},
		{20 * time.Millisecond, 0.25, 60 * time.Millisecond},
		{30 * time.Millisecond, 0.75, 10 * time.Millisecond},
		{20 * time.Millisecond, 0.999999, 0},
	} {
		if got := rest(c.worked, c.share).Round(time.Millisecond); got != c.want {
			t.Errorf("rest(%s, %g) = %s, want %s", c.worked, c.share, got, c.want)
		}
	}
}

// TestPacerOfFullShare: a share of 1 makes no pacer, and a nil pacer
// never waits, even on a cancelled context.
func TestPacerOfFullShare(t *testing.T) {
	p := newPacer(1)
	if p != nil {
		t.Fatalf("newPacer(1) = %+v, want nil", p)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.pace(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.tick(ctx); err != nil {
		t.Fatal(err)
	}
}
