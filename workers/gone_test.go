package workers_test

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestGoneDisablesTheTarget: two processes attempt two deliveries of a
// target whose receiver answers both at once 410 Gone. Both deliveries
// fail, the target is disabled by one target.disabled, and a message
// ingested then is delivered to its other target while its delivery to
// the disabled one waits, not attempted, until an operator enables the
// target again.
func TestGoneDisablesTheTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	web := b.httpTarget("web")
	web.Config, _ = json.Marshal(map[string]string{"url": b.sink.URL + "/web"})
	// Both attempts in flight at once, whichever process makes them: with
	// max_concurrent 1 the first would wait for the second until its
	// request timed out.
	web.MaxConcurrent = 2
	b.target(t, web)
	b.target(t, b.httpTarget("other"))
	var gone atomic.Bool
	gone.Store(true)
	var webHits atomic.Int32
	both := make(chan struct{})
	b.sink.setAnswer(func(_ int, _ http.ResponseWriter, r *http.Request) int {
		if r.URL.Path != "/web" {
			return http.StatusOK
		}
		if !gone.Load() {
			return http.StatusOK
		}
		// The two 410s are answered together, so both are recorded at once.
		if webHits.Add(1) == 2 {
			close(both)
		}
		select {
		case <-both:
		case <-r.Context().Done():
		}
		return http.StatusGone
	})
	// Both processes run on the real clock: a claim made on the bundle's
	// frozen clock would look expired to the other process, which would
	// claim that delivery again instead of the second one.
	rt := b.process(t).runtime(t, b)
	b.process(t).runtime(t, b)
	// Each wake-up reaches both processes; either may claim.
	first := b.ingest(t, 2)
	b.waitStatus(t, lifecycle.StatusError, first...)
	for _, m := range first {
		if d := deliveryTo(t, b.load(t, m.ID), "web"); d.State != lifecycle.StateFailed || d.Attempts != 1 {
			t.Fatalf("delivery to web %s after %d attempts, want failed after 1", d.State, d.Attempts)
		}
	}
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	var disabled []*journal.TargetDisabled
	for _, e := range events {
		if p, ok := e.Payload.(*journal.TargetDisabled); ok {
			disabled = append(disabled, p)
		}
	}
	if len(disabled) != 1 || disabled[0].Target != "web" || disabled[0].Reason != journal.DisabledGone || disabled[0].StatusCode != 410 {
		t.Fatalf("target.disabled events %+v, want one of web, reason gone, 410", disabled)
	}
	if spec := b.targetNamed(t, "web"); spec.Enabled {
		t.Fatal("web is still enabled")
	}

	gone.Store(false)
	m := b.ingest(t, 1)[0]
	b.waitState(t, deliveryTo(t, m, "other").ID, lifecycle.StateDelivered)
	if d := deliveryTo(t, b.load(t, m.ID), "web"); d.State != lifecycle.StateQueued || d.Attempts != 0 {
		t.Fatalf("delivery to the disabled web %s after %d attempts, want queued", d.State, d.Attempts)
	}
	if n := webHits.Load(); n != 2 {
		t.Fatalf("web got %d requests, want the 2 answered 410", n)
	}

	web = b.targetNamed(t, "web")
	web.Enabled = true
	if _, err := b.w.UpdateTarget(b.ctx, web, admin); err != nil {
		t.Fatal(err)
	}
	rt.ConfigChanged()
	b.waitStatus(t, lifecycle.StatusDelivered, m)
	b.audit(t)
}

// TestRetryAfterHoldsTheDelivery: an answer 429, 502, 503 or 504 with a
// Retry-After, in seconds or as an HTTP date, makes the delivery due no
// sooner than it says (and no later than max_delay), and holds the whole
// target as long (target.throttled); without one, or with one sooner than
// the back-off, the back-off decides.
func TestRetryAfterHoldsTheDelivery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		code       int
		retryAfter func(now time.Time) string
		want, hold time.Duration
	}{
		{"429 in seconds", http.StatusTooManyRequests, func(time.Time) string { return "30" }, 30 * time.Second, 30 * time.Second},
		{"502 as a date", http.StatusBadGateway, func(now time.Time) string { return now.Add(45 * time.Second).Format(http.TimeFormat) },
			45 * time.Second, 45 * time.Second},
		{"503 past max_delay", http.StatusServiceUnavailable, func(time.Time) string { return "7200" }, time.Hour, time.Hour},
		{"504 sooner than the back-off", http.StatusGatewayTimeout, func(time.Time) string { return "3" }, 10 * time.Second, 3 * time.Second},
		{"503 without", http.StatusServiceUnavailable, func(time.Time) string { return "" }, 10 * time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			spec := b.httpTarget("web")
			spec.Retry = lifecycle.RetryPolicy{Strategy: lifecycle.RetryFixed, BaseDelay: lifecycle.Duration(10 * time.Second),
				MaxDelay: lifecycle.Duration(time.Hour), Jitter: new(0.0)}
			b.target(t, spec)
			b.runtime(t, 0)
			now := b.clock.Now()
			b.sink.setAnswer(func(_ int, w http.ResponseWriter, _ *http.Request) int {
				if v := tt.retryAfter(now); v != "" {
					w.Header().Set("Retry-After", v)
				}
				return tt.code
			})
			m := b.ingest(t, 1)[0]
			b.waitState(t, m.Deliveries[0].ID, lifecycle.StateRetrying)
			if got := b.load(t, m.ID).Deliveries[0].NextDue; !got.Equal(now.Add(tt.want)) {
				t.Errorf("due %s after the answer, want %s", got.Sub(now), tt.want)
			}
			var events []journal.Event
			testpoll.Until(t, "the target's hold", func() bool {
				var err error
				events, err = journal.Stream(b.ctx, b.db, journal.TargetStream("web"))
				return err == nil && (tt.hold == 0 || len(events) == 1)
			})
			if tt.hold == 0 {
				if len(events) != 0 {
					t.Errorf("held without a Retry-After: %v", events)
				}
				return
			}
			if p, ok := events[0].Payload.(*journal.TargetThrottled); !ok || !p.Until.Equal(now.Add(tt.hold)) || p.StatusCode != tt.code {
				t.Errorf("throttled: %+v, want until %s after the answer", events[0].Payload, tt.hold)
			}
			b.audit(t)
		})
	}
}

// deliveryTo returns m's delivery to target.
func deliveryTo(t *testing.T, m *projection.Message, target string) projection.Delivery {
	t.Helper()
	for _, d := range m.Deliveries {
		if d.Target == target {
			return d
		}
	}
	t.Fatalf("message %s has no delivery to %s", m.ID, target)
	return projection.Delivery{}
}

// targetNamed returns the stored definition of the target.
func (b *bundle) targetNamed(t *testing.T, name string) lifecycle.Target {
	t.Helper()
	all, err := b.w.Targets(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range all {
		if tg.Name == name {
			return tg
		}
	}
	t.Fatalf("no target %s", name)
	return lifecycle.Target{}
}
