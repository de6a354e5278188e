package commands_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// disabledEvents returns the journal's target.disabled events.
func disabledEvents(t *testing.T, b *bundle) []journal.Event {
	t.Helper()
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []journal.Event
	for _, e := range events {
		if e.Kind() == journal.KindTargetDisabled {
			out = append(out, e)
		}
	}
	return out
}

// target returns the stored definition of the named target.
func (b *bundle) target(t *testing.T, name string) lifecycle.Target {
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

// TestGoneDisablesTheTargetOnce: two Writers, as two processes, record at
// once an answer 410 Gone of the same target. Both deliveries fail for
// good, the target is disabled by one target.disabled naming one of them,
// and no Writer claims for it any more, not even one whose configuration
// was read before (the claim's check in its transaction refuses it), until
// an operator enables it again. The other target goes on.
func TestGoneDisablesTheTargetOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	w2, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	late, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.CachedSettings(b.ctx); err != nil { // its configuration is read now
		t.Fatal(err)
	}
	m1, m2, m3 := b.ingest(t), b.ingest(t), b.ingest(t)
	writers := []*commands.Writer{b.w, w2}
	claims := make([]commands.Claim, 2)
	for i, m := range []*projection.Message{m1, m2} {
		if claims[i], err = writers[i].Claim(b.ctx, deliveryTo(t, m, "alpha").ID, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = writers[i].Complete(b.ctx, claims[i].Delivery.ID, claims[i].Token, lifecycle.Gone("410 Gone: no such hook"))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
	}
	for _, m := range []*projection.Message{m1, m2} {
		got, err := projection.Load(b.ctx, b.db, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := deliveryTo(t, got, "alpha"); d.State != lifecycle.StateFailed {
			t.Errorf("delivery %s is %s, want failed", d.ID, d.State)
		}
	}
	events := disabledEvents(t, b)
	if len(events) != 1 {
		t.Fatalf("%d target.disabled events, want 1", len(events))
	}
	p := events[0].Payload.(*journal.TargetDisabled)
	if p.Target != "alpha" || p.Reason != journal.DisabledGone || p.StatusCode != 410 ||
		(p.DeliveryID != claims[0].Delivery.ID && p.DeliveryID != claims[1].Delivery.ID) ||
		events[0].Actor != journal.WorkerActor("alpha") {
		t.Errorf("event %s %+v", events[0].Actor, p)
	}
	if b.target(t, "alpha").Enabled || !b.target(t, "beta").Enabled {
		t.Fatalf("alpha enabled %v, beta enabled %v; want alpha alone disabled", b.target(t, "alpha").Enabled, b.target(t, "beta").Enabled)
	}

	queued := deliveryTo(t, m3, "alpha").ID
	for _, w := range []*commands.Writer{b.w, w2, late} {
		if _, err := w.Claim(b.ctx, queued, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
			t.Fatalf("claim of a disabled target's delivery: %v, want ErrNotClaimable", err)
		}
		if got, err := w.ClaimDue(b.ctx, "alpha", 5, time.Minute); err != nil || len(got) != 0 {
			t.Fatalf("ClaimDue of a disabled target: %d claims, %v", len(got), err)
		}
	}
	if _, err := late.Claim(b.ctx, deliveryTo(t, m3, "beta").ID, time.Minute); err != nil {
		t.Fatalf("claim for the other target: %v", err)
	}

	// An operator enables it again; the other processes hear of it.
	alpha := b.target(t, "alpha")
	alpha.Enabled = true
	if _, err := b.w.UpdateTarget(b.ctx, alpha, admin); err != nil {
		t.Fatal(err)
	}
	late.Invalidate()
	if _, err := late.Claim(b.ctx, queued, time.Minute); err != nil {
		t.Fatalf("claim once enabled: %v", err)
	}
	b.audit(t)
}

// TestGoneOfADisabledTarget: a 410 of a delivery claimed before an operator
// disabled its target fails the delivery and journals nothing more.
func TestGoneOfADisabledTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	alpha := b.target(t, "alpha")
	alpha.Enabled = false
	if _, err := b.w.UpdateTarget(b.ctx, alpha, admin); err != nil {
		t.Fatal(err)
	}
	m, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.Gone("410 Gone"))
	if err != nil || m.Deliveries[0].State != lifecycle.StateFailed {
		t.Fatalf("complete: %v, %+v", err, m)
	}
	if n := len(disabledEvents(t, b)); n != 0 {
		t.Errorf("%d target.disabled events, want none", n)
	}
	// A lost claim's 410 changes nothing either.
	if _, err := b.w.Complete(b.ctx, d.ID, uuid.New(), lifecycle.Gone("410 Gone")); !errors.Is(err, commands.ErrClaimLost) {
		t.Errorf("stale token: %v", err)
	}
	b.audit(t)
}

// TestUpdateKeepingEnabledLetsADisablingStand: updates that leave enabled
// to the configuration (a PUT without it), made from a definition read
// while the target was enabled and racing a 410, never enable the target
// again; one that says enabled does.
func TestUpdateKeepingEnabledLetsADisablingStand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	stale := b.target(t, "alpha")
	m := b.ingest(t)
	claim, err := b.w.Claim(b.ctx, deliveryTo(t, m, "alpha").ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		updates int
	)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			next := stale
			next.MaxConcurrent = 1 + updates%3
			got, err := other.UpdateTargetKeepingEnabled(b.ctx, next, admin)
			if err != nil {
				t.Error(err)
				return
			}
			if !got.Enabled {
				return // the disabling came first, and stood
			}
			updates++
		}
	})
	if _, err := b.w.Complete(b.ctx, claim.Delivery.ID, claim.Token, lifecycle.Gone("410 Gone")); err != nil {
		t.Fatal(err)
	}
	// One more update after the disabling, whatever the race did.
	got, err := other.UpdateTargetKeepingEnabled(b.ctx, stale, admin)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got.Enabled || b.target(t, "alpha").Enabled {
		t.Fatalf("enabled again by an update that left enabled out (answer %v, %d updates before)", got.Enabled, updates)
	}
	if n := len(disabledEvents(t, b)); n != 1 {
		t.Fatalf("%d target.disabled events, want 1", n)
	}
	stale.Enabled = true
	if got, err := other.UpdateTarget(b.ctx, stale, admin); err != nil || !got.Enabled || !b.target(t, "alpha").Enabled {
		t.Fatalf("an update that says enabled: %+v, %v", got, err)
	}
	b.audit(t)
}
