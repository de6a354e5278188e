package workers_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// TestDisablingStopsTheWorkersAtOnce runs two runtimes on one database and
// one NATS, as two processes would, neither reading the targets again on
// its own for an hour: a target whose receiver only fails for its
// disable_after is disabled by the outcome that finds it so, and the
// worker of each runtime stops at once.
func TestDisablingStopsTheWorkersAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	after := lifecycle.Duration(time.Second)
	spec.Health = &lifecycle.Health{DisableAfter: &after}
	spec.Retry = lifecycle.RetryPolicy{Strategy: lifecycle.RetryFixed, BaseDelay: lifecycle.Duration(time.Hour),
		MaxDelay: lifecycle.Duration(time.Hour), Jitter: new(0.0)}
	b.target(t, spec)
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int { return http.StatusInternalServerError })
	slow := func(w *commands.Writer) *workers.Runtime {
		rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: w, NATS: b.nc,
			Resync: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Stop(context.Background()) })
		return rt
	}
	runtimes := []*workers.Runtime{slow(b.w), slow(b.writer(t, workers.NewPublisher(b.nc, nil, nil)))}
	// A runtime lends a slot only of a target it runs a worker of.
	working := func(rt *workers.Runtime) bool {
		s, ok := rt.Reserve("web")
		if ok {
			s.Free()
		}
		return ok
	}
	for i, rt := range runtimes {
		// A worker that is catching up lends no slot.
		testpoll.Until(t, fmt.Sprintf("runtime %d's worker of web to lend a slot", i), func() bool { return working(rt) })
	}

	first := b.ingest(t, 1)[0]
	b.waitState(t, first.Deliveries[0].ID, lifecycle.StateRetrying)
	b.clock.Advance(after.D())
	second := b.ingest(t, 1)[0]
	b.waitState(t, second.Deliveries[0].ID, lifecycle.StateRetrying)
	for i, rt := range runtimes {
		testpoll.Until(t, fmt.Sprintf("runtime %d's worker of the disabled target to stop", i), func() bool { return !working(rt) })
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
	if len(disabled) != 1 || disabled[0].Reason != journal.DisabledFailing {
		t.Fatalf("target.disabled events %+v, want one, reason failing", disabled)
	}
	if n := b.sink.requests(); n != 2 {
		t.Fatalf("web got %d requests, want 2", n)
	}
	b.audit(t)
}
