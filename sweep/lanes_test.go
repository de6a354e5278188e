package sweep_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/sweep"
)

// TestPassReportsAndReleasesLanes: a head that keeps deliveries waiting past
// head_alert_after is reported once; turning fifo off lets every blocked
// delivery of the target go, woken, in one pass.
func TestPassReportsAndReleasesLanes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO, HeadAlertAfter: lifecycle.Duration(time.Minute)}}
	if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "hl7"}, admin); err != nil {
		t.Fatal(err)
	}
	var ds []projection.Delivery
	for range 3 {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"), OrderingKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, m.Deliveries[0])
	}
	// The head is being attempted: the sweep must not wake it.
	b.claim(t, ds[0], time.Hour)
	s := b.sweeper(t, sweep.Config{})
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{}) {
		t.Fatalf("first pass: %+v %v", r, err)
	}
	b.clock.Advance(2 * time.Minute)
	if r, err := s.Pass(b.ctx); err != nil || r.Reported != 1 {
		t.Fatalf("pass past head_alert_after: %+v %v", r, err)
	}
	if r, err := s.Pass(b.ctx); err != nil || r.Reported != 0 {
		t.Fatalf("a head is reported once: %+v %v", r, err)
	}

	spec.Ordering.Mode = lifecycle.OrderingNone
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	b.wake.take(t)
	if r, err := s.Pass(b.ctx); err != nil || r.Released != 2 {
		t.Fatalf("pass after fifo was turned off: %+v %v", r, err)
	}
	for _, d := range ds[1:] {
		if got := b.delivery(t, d); got.State != lifecycle.StateQueued {
			t.Errorf("delivery %s is %s after the release", d.ID, got.State)
		}
	}
	if woken := b.wake.take(t); len(woken) != 2 {
		t.Errorf("wake-ups after the release: %v", woken)
	}
	dbtest.Audit(t, b.db)
}
