package commands_test

import (
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// healthTarget creates target "alpha", routed from "erp", with the breaker.
func (b *bundle) healthTarget(t *testing.T, breaker *lifecycle.Breaker) {
	t.Helper()
	after := lifecycle.Duration(lifecycle.DefaultDisableAfter)
	spec := lifecycle.Target{Name: "alpha", Kind: "http", Enabled: true, Config: sinkConfig,
		Health: &lifecycle.Health{Breaker: breaker, DisableAfter: &after}}
	if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "alpha"}, admin); err != nil {
		t.Fatal(err)
	}
}

// healthEvents returns the kinds of the target's health stream.
func (b *bundle) healthEvents(t *testing.T, target string) []journal.Event {
	t.Helper()
	events, err := journal.Stream(b.ctx, b.db, journal.TargetStream(target))
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func kinds(events []journal.Event) []journal.Kind {
	out := make([]journal.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind()
	}
	return out
}

func TestBreakerOpensHoldsProbesAndCloses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.healthTarget(t, &lifecycle.Breaker{Window: lifecycle.Duration(time.Minute), MinRequests: 3, FailureRate: 0.5,
		Cooldown: lifecycle.Duration(10 * time.Second), MaxCooldown: lifecycle.Duration(15 * time.Second)})
	// A second Writer stands for a second process on the same database.
	other, err := newWriter(b, &wakeups{})
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		b.ingest(t)
		b.clock.Advance(time.Millisecond)
	}
	lease := time.Minute
	fail := func(c commands.Claim) {
		t.Helper()
		if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Retry(b.clock.Now().Add(time.Second), "500")); err != nil {
			t.Fatal(err)
		}
	}
	// One success, then failures: the third ended attempt of the window
	// with two failures trips it.
	first := b.claimDue(t, "alpha", 3, lease)
	if len(first) != 3 {
		t.Fatalf("claimed %d, want 3", len(first))
	}
	if _, err := b.w.Complete(b.ctx, first[0].Delivery.ID, first[0].Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	fail(first[1])
	if got := kinds(b.healthEvents(t, "alpha")); len(got) != 0 {
		t.Fatalf("health events after 2 of 3: %v", got)
	}
	fail(first[2])
	events := b.healthEvents(t, "alpha")
	if len(events) != 1 {
		t.Fatalf("health events: %v", kinds(events))
	}
	opened, ok := events[0].Payload.(*journal.BreakerOpened)
	if !ok || opened.Requests != 3 || opened.Failures != 2 || !opened.Until.Equal(b.clock.Now().Add(10*time.Second)) {
		t.Fatalf("opened: %+v", events[0].Payload)
	}

	// Held: no claim by either Writer, by choice or by wake-up.
	for _, w := range []*commands.Writer{b.w, other} {
		if claims, err := w.ClaimDue(b.ctx, "alpha", 5, lease); err != nil || len(claims) != 0 {
			t.Fatalf("claimed %d while open: %v", len(claims), err)
		}
	}
	if until := other.HeldUntil("alpha"); !until.Equal(opened.Until) {
		t.Errorf("held until %s, want %s", until, opened.Until)
	}
	due := b.ingest(t).Deliveries[0]
	if _, err := other.Claim(b.ctx, due.ID, lease); err == nil {
		t.Fatal("a wake-up's claim went through an open breaker")
	}

	// After the cooldown: one probe, whichever Writer asks. Until one asks
	// (a step to half-open that failed, one that has not been tried), a
	// worker is told to come back soon, not never.
	b.clock.Advance(10 * time.Second)
	if until := other.HeldUntil("alpha"); !until.After(b.clock.Now()) || until.After(b.clock.Now().Add(time.Minute)) {
		t.Errorf("held until %s at %s, once the cooldown is over", until, b.clock.Now())
	}
	probe, err := other.ClaimDue(b.ctx, "alpha", 5, lease)
	if err != nil || len(probe) != 1 {
		t.Fatalf("probe: %d claimed, %v", len(probe), err)
	}
	if more, err := b.w.ClaimDue(b.ctx, "alpha", 5, lease); err != nil || len(more) != 0 {
		t.Fatalf("claimed %d beside the probe: %v", len(more), err)
	}
	// Its failure opens the breaker again, for twice the cooldown capped
	// at max_cooldown.
	if _, err := other.Complete(b.ctx, probe[0].Delivery.ID, probe[0].Token, lifecycle.Retry(b.clock.Now().Add(time.Second), "500")); err != nil {
		t.Fatal(err)
	}
	events = b.healthEvents(t, "alpha")
	if got := kinds(events); len(got) != 3 || got[1] != journal.KindBreakerHalfOpened || got[2] != journal.KindBreakerOpened {
		t.Fatalf("health events: %v", got)
	}
	if again := events[2].Payload.(*journal.BreakerOpened); !again.Probe || again.Cooldown != lifecycle.Duration(15*time.Second) {
		t.Fatalf("opened again: %+v", again)
	}
	b.clock.Advance(15 * time.Second)
	probe = b.claimDue(t, "alpha", 5, lease)
	if len(probe) != 1 {
		t.Fatalf("second probe: %d claimed", len(probe))
	}
	if _, err := b.w.Complete(b.ctx, probe[0].Delivery.ID, probe[0].Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	events = b.healthEvents(t, "alpha")
	closed, ok := events[len(events)-1].Payload.(*journal.BreakerClosed)
	if !ok || closed.DeliveryID != probe[0].Delivery.ID {
		t.Fatalf("closed: %v", kinds(events))
	}
	// Closed: the backlog goes, the 13 deliveries but the two delivered.
	claims, err := other.ClaimDue(b.ctx, "alpha", 100, lease)
	if err != nil || len(claims) != 11 {
		t.Fatalf("after closing: %d claimed, %v", len(claims), err)
	}
	b.audit(t)
}

func TestThrottleHoldsTheTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.healthTarget(t, nil)
	m1, m2 := b.ingest(t), b.ingest(t)
	c, err := b.w.Claim(b.ctx, m1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	until := b.clock.Now().Add(5 * time.Second)
	o := lifecycle.Retry(until, "429 Too Many Requests")
	o.Hold = &lifecycle.Hold{Until: until, Status: 429}
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, o); err != nil {
		t.Fatal(err)
	}
	events := b.healthEvents(t, "alpha")
	if len(events) != 1 {
		t.Fatalf("health events: %v", kinds(events))
	}
	if p, ok := events[0].Payload.(*journal.TargetThrottled); !ok || !p.Until.Equal(until) || p.StatusCode != 429 || p.DeliveryID != c.Delivery.ID {
		t.Fatalf("throttled: %+v", events[0].Payload)
	}
	if _, err := b.w.Claim(b.ctx, m2.Deliveries[0].ID, time.Minute); err == nil {
		t.Fatal("claimed while throttled")
	}
	if claims := b.claimDue(t, "alpha", 5, time.Minute); len(claims) != 0 {
		t.Fatalf("claimed %d while throttled", len(claims))
	}
	if got := b.w.HeldUntil("alpha"); !got.Equal(until) {
		t.Errorf("held until %s, want %s", got, until)
	}
	b.clock.Advance(5 * time.Second)
	if claims := b.claimDue(t, "alpha", 5, time.Minute); len(claims) != 2 {
		t.Fatalf("claimed %d after the hold", len(claims))
	}
	b.audit(t)
}

func TestCloseBreakerByHand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.healthTarget(t, &lifecycle.Breaker{Window: lifecycle.Duration(time.Minute), MinRequests: 1, FailureRate: 1,
		Cooldown: lifecycle.Duration(time.Hour), MaxCooldown: lifecycle.Duration(time.Hour)})
	m := b.ingest(t)
	b.ingest(t)
	c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Failed("400")); err != nil {
		t.Fatal(err)
	}
	if claims := b.claimDue(t, "alpha", 5, time.Minute); len(claims) != 0 {
		t.Fatalf("claimed %d while open", len(claims))
	}
	h, err := b.w.CloseBreaker(b.ctx, "alpha", admin)
	if err != nil || h.Breaker != lifecycle.HealthClosed {
		t.Fatalf("close: %+v %v", h, err)
	}
	events := b.healthEvents(t, "alpha")
	if got := kinds(events); len(got) != 2 || got[1] != journal.KindBreakerClosed || events[1].Actor != admin {
		t.Fatalf("health events: %v", got)
	}
	if claims := b.claimDue(t, "alpha", 5, time.Minute); len(claims) != 1 {
		t.Fatalf("claimed %d after closing", len(claims))
	}
	if _, err := b.w.CloseBreaker(b.ctx, "nowhere", admin); err == nil {
		t.Fatal("closed the breaker of an unknown target")
	}
	health, err := projection.LoadHealth(b.ctx, b.db, []string{"alpha"})
	if err != nil || health["alpha"].Version != 2 {
		t.Fatalf("health: %+v %v", health, err)
	}
	b.audit(t)
}

func TestFailingTargetIsDisabledOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	after := lifecycle.Duration(30 * time.Second)
	spec := lifecycle.Target{Name: "alpha", Kind: "http", Enabled: true, Config: sinkConfig,
		Health: &lifecycle.Health{DisableAfter: &after}}
	if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "alpha"}, admin); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		b.ingest(t)
	}
	fail := func() {
		t.Helper()
		claims := b.claimDue(t, "alpha", 1, time.Minute)
		if len(claims) != 1 {
			t.Fatalf("claimed %d", len(claims))
		}
		if _, err := b.w.Complete(b.ctx, claims[0].Delivery.ID, claims[0].Token, lifecycle.Retry(b.clock.Now().Add(time.Hour), "500")); err != nil {
			t.Fatal(err)
		}
	}
	disabled := func() []*journal.TargetDisabled {
		t.Helper()
		events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
		if err != nil {
			t.Fatal(err)
		}
		var out []*journal.TargetDisabled
		for _, e := range events {
			if p, ok := e.Payload.(*journal.TargetDisabled); ok {
				out = append(out, p)
			}
		}
		return out
	}
	start := b.clock.Now()
	fail()
	b.clock.Advance(29 * time.Second)
	fail()
	if got := disabled(); len(got) != 0 {
		t.Fatalf("disabled before disable_after: %+v", got)
	}
	b.clock.Advance(time.Second)
	fail()
	got := disabled()
	if len(got) != 1 || got[0].Reason != journal.DisabledFailing || !got[0].FailingSince.Equal(start) {
		t.Fatalf("disabled: %+v", got)
	}
	if claims := b.claimDue(t, "alpha", 5, time.Minute); len(claims) != 0 {
		t.Fatalf("claimed %d of a disabled target", len(claims))
	}
	// Enabled again, it counts afresh.
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	fail()
	if got := disabled(); len(got) != 1 {
		t.Fatalf("disabled again at once: %+v", got)
	}
	b.audit(t)
}

// TestDeletedTargetTakesItsHealthAlong: a target deleted with its breaker
// open and failing, and made again under its name, starts closed with
// nothing counted, in the table and in the fold of the journal: its claims
// go, the audit finds none made while a breaker was open, and a rebuild
// comes to the same health.
func TestDeletedTargetTakesItsHealthAlong(t *testing.T) {
	t.Parallel()
	b := setup(t)
	breaker := &lifecycle.Breaker{Window: lifecycle.Duration(time.Minute), MinRequests: 1, FailureRate: 0.5,
		Cooldown: lifecycle.Duration(10 * time.Minute), MaxCooldown: lifecycle.Duration(10 * time.Minute)}
	b.healthTarget(t, breaker)
	b.ingest(t)
	b.ingest(t)
	claims := b.claimDue(t, "alpha", 1, time.Minute)
	if len(claims) != 1 {
		t.Fatalf("claimed %d, want 1", len(claims))
	}
	if _, err := b.w.Complete(b.ctx, claims[0].Delivery.ID, claims[0].Token, lifecycle.Retry(b.clock.Now().Add(time.Second), "500")); err != nil {
		t.Fatal(err)
	}
	health := func() projection.TargetHealth {
		t.Helper()
		rows, err := projection.LoadHealth(b.ctx, b.db, []string{"alpha"})
		if err != nil {
			t.Fatal(err)
		}
		return rows["alpha"]
	}
	if h := health(); h.Breaker != lifecycle.HealthOpen || h.FailingSince.IsZero() {
		t.Fatalf("health before the deletion: %+v", h)
	}

	routes, err := b.w.Routes(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if err := b.w.DeleteRoute(b.ctx, r.ID, admin); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.w.DeleteTarget(b.ctx, "alpha", admin); err != nil {
		t.Fatal(err)
	}
	want := projection.TargetHealth{Target: "alpha", Version: 1, Breaker: lifecycle.HealthClosed}
	if h := health(); h != want {
		t.Fatalf("health after the deletion: %+v, want %+v", h, want)
	}
	b.healthTarget(t, breaker)
	if claims := b.claimDue(t, "alpha", 5, time.Minute); len(claims) != 1 {
		t.Fatalf("claimed %d of the target made again, want 1", len(claims))
	}
	if _, err := projection.Rebuild(b.ctx, b.db); err != nil {
		t.Fatal(err)
	}
	if h := health(); h != want {
		t.Fatalf("health after a rebuild: %+v, want %+v", h, want)
	}
	b.audit(t)
}

// TestAFailedCountLeavesTheOutcomeRecorded: the breaker's count follows
// the outcomes' COMMIT in the same round trip, so a count that fails
// there leaves the outcome recorded and its caller untroubled; the next
// count, once it can, counts on. The outcomes fail, as a failure is
// counted at once (a success may be held, TestSuccessesAreCountedTogether).
func TestAFailedCountLeavesTheOutcomeRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	breaker := lifecycle.DefaultBreaker()
	b.healthTarget(t, &breaker)
	var ms []*projection.Message
	for range 3 {
		ms = append(ms, b.ingest(t))
	}
	fail := func(m *projection.Message) {
		t.Helper()
		c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Retry(b.clock.Now().Add(time.Hour), "500")); err != nil {
			t.Fatalf("complete: %v", err)
		}
	}
	fail(ms[0])
	if n := b.windowRequests(t, "alpha"); n != 1 {
		t.Fatalf("window after the first outcome: %d requests, want 1", n)
	}
	if _, err := b.db.Exec(b.ctx, `CREATE FUNCTION refuse_count() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'count refused'; END $$;
		CREATE TRIGGER refuse_count BEFORE UPDATE ON target_health FOR EACH ROW EXECUTE FUNCTION refuse_count()`); err != nil {
		t.Fatal(err)
	}
	fail(ms[1])
	m, err := projection.Load(b.ctx, b.db, ms[1].ID)
	if err != nil || m.Deliveries[0].State != lifecycle.StateRetrying {
		t.Fatalf("the outcome whose count failed: %v", err)
	}
	if n := b.windowRequests(t, "alpha"); n != 1 {
		t.Fatalf("window after the refused count: %d requests, want 1", n)
	}
	if _, err := b.db.Exec(b.ctx, `DROP TRIGGER refuse_count ON target_health`); err != nil {
		t.Fatal(err)
	}
	fail(ms[2])
	if n := b.windowRequests(t, "alpha"); n != 2 {
		t.Fatalf("window after the next outcome: %d requests, want 2", n)
	}
	b.audit(t)
}

// windowRequests is the attempts counted into target's breaker window.
func (b *bundle) windowRequests(t *testing.T, target string) int {
	t.Helper()
	rows, err := projection.LoadHealth(b.ctx, b.db, []string{target})
	if err != nil {
		t.Fatal(err)
	}
	return rows[target].WindowRequests
}

// TestSuccessesAreCountedTogether: once a count has found the target's
// breaker closed and nothing failing, its successes are held and counted
// with its next failure, or with the next outcome, or by CountHeld, 100 ms
// or more after the first held; nothing is lost.
func TestSuccessesAreCountedTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	breaker := lifecycle.DefaultBreaker()
	b.healthTarget(t, &breaker)
	end := func(o lifecycle.Outcome) {
		t.Helper()
		m := b.ingest(t)
		c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, o); err != nil {
			t.Fatalf("complete: %v", err)
		}
	}
	for i, want := range []int{1, 1, 1} {
		end(lifecycle.Delivered("200"))
		if n := b.windowRequests(t, "alpha"); n != want {
			t.Fatalf("after success %d: %d requests, want %d", i+1, n, want)
		}
	}
	b.clock.Advance(100 * time.Millisecond)
	end(lifecycle.Delivered("200"))
	if n := b.windowRequests(t, "alpha"); n != 4 {
		t.Fatalf("after 100 ms: %d requests, want 4", n)
	}
	end(lifecycle.Delivered("200"))
	end(lifecycle.Retry(b.clock.Now().Add(time.Hour), "500"))
	rows, err := projection.LoadHealth(b.ctx, b.db, []string{"alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if h := rows["alpha"]; h.WindowRequests != 6 || h.WindowFailures != 1 {
		t.Fatalf("after a failure: %d requests, %d failures, want 6 and 1", h.WindowRequests, h.WindowFailures)
	}
	// What is held when the outcomes stop, the sweep's pass counts.
	end(lifecycle.Delivered("200"))
	if err := b.w.CountHeld(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.windowRequests(t, "alpha"); n != 6 {
		t.Fatalf("counted at once what was held: %d requests, want 6", n)
	}
	b.clock.Advance(100 * time.Millisecond)
	if err := b.w.CountHeld(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.windowRequests(t, "alpha"); n != 7 {
		t.Fatalf("after CountHeld: %d requests, want 7", n)
	}
	b.audit(t)
}

// TestAProbesSuccessIsCountedAtOnce: a Writer whose last count found the
// breaker closed, and that another process opened since, claims the probe:
// its success is counted at once and closes the breaker.
func TestAProbesSuccessIsCountedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.healthTarget(t, &lifecycle.Breaker{Window: lifecycle.Duration(time.Minute), MinRequests: 3, FailureRate: 0.5,
		Cooldown: lifecycle.Duration(10 * time.Second), MaxCooldown: lifecycle.Duration(time.Minute)})
	other, err := newWriter(b, &wakeups{})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		b.ingest(t)
		b.clock.Advance(time.Millisecond)
	}
	lease := time.Minute
	first := b.claimDue(t, "alpha", 1, lease)
	if _, err := b.w.Complete(b.ctx, first[0].Delivery.ID, first[0].Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	failing, err := other.ClaimDue(b.ctx, "alpha", 3, lease)
	if err != nil || len(failing) != 3 {
		t.Fatalf("claimed %d: %v", len(failing), err)
	}
	for _, c := range failing {
		if _, err := other.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Retry(b.clock.Now().Add(time.Second), "500")); err != nil {
			t.Fatal(err)
		}
	}
	if got := kinds(b.healthEvents(t, "alpha")); len(got) != 1 || got[0] != journal.KindBreakerOpened {
		t.Fatalf("health events: %v", got)
	}
	b.clock.Advance(10 * time.Second)
	probe := b.claimDue(t, "alpha", 5, lease)
	if len(probe) != 1 {
		t.Fatalf("probe: %d claimed", len(probe))
	}
	if _, err := b.w.Complete(b.ctx, probe[0].Delivery.ID, probe[0].Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	events := b.healthEvents(t, "alpha")
	if closed, ok := events[len(events)-1].Payload.(*journal.BreakerClosed); !ok || closed.DeliveryID != probe[0].Delivery.ID {
		t.Fatalf("health events: %v", kinds(events))
	}
	b.audit(t)
}
