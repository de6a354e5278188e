package sweep_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
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
	b.laneTarget(t, spec)
	ds := []projection.Delivery{b.ingestKeyed(t), b.ingestKeyed(t), b.ingestKeyed(t)}
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

// TestLaneGoesOnAfterOrderingTurnedOffAndOn: a lane's head that settles
// while its target keeps no order passes the lane on all the same, in the
// same transaction, so a target made fifo again before any pass of the
// sweep has its lane go on: the delivery waiting is not left blocked for
// ever, and new messages of the key do not queue behind it.
func TestLaneGoesOnAfterOrderingTurnedOffAndOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}
	b.laneTarget(t, spec)
	ds := []projection.Delivery{b.ingestKeyed(t), b.ingestKeyed(t), b.ingestKeyed(t)}
	c := b.claim(t, ds[0], time.Hour)

	spec.Ordering.Mode = lifecycle.OrderingNone
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	b.complete(t, c, lifecycle.Delivered("200 OK"))
	if got := b.delivery(t, ds[1]); got.State != lifecycle.StateQueued {
		t.Fatalf("the next of the lane is %s once its head was delivered", got.State)
	}
	b.audit(t)

	spec.Ordering.Mode = lifecycle.OrderingFIFO
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	s := b.sweeper(t, sweep.Config{})
	for range 5 {
		b.clock.Advance(time.Hour)
		if _, err := s.Pass(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.delivery(t, ds[2]); got.State != lifecycle.StateBlocked {
		t.Fatalf("the third of the lane is %s, want blocked behind the second", got.State)
	}
	b.audit(t)

	// The lane goes on in order, a new message of the key behind the rest.
	last := b.ingestKeyed(t)
	for i, d := range []projection.Delivery{ds[1], ds[2], last} {
		if got := b.delivery(t, d); got.State == lifecycle.StateBlocked {
			t.Fatalf("delivery %d of the lane is blocked when its turn came", i+2)
		}
		b.complete(t, b.claim(t, d, time.Hour), lifecycle.Delivered("200 OK"))
	}
	var lanes int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM lanes`).Scan(&lanes); err != nil || lanes != 0 {
		t.Fatalf("lanes left: %d %v", lanes, err)
	}
	b.audit(t)
}

// TestReleasedDeliveryClaimedAfterOrderingBack: deliveries the sweep let
// go out of turn while their target kept no order have left their lane;
// once the target keeps order again, each is claimed as any delivery, and
// the audit, which knows they left, finds nothing wrong.
func TestReleasedDeliveryClaimedAfterOrderingBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}
	b.laneTarget(t, spec)
	ds := []projection.Delivery{b.ingestKeyed(t), b.ingestKeyed(t), b.ingestKeyed(t)}
	head := b.claim(t, ds[0], time.Hour)
	spec.Ordering.Mode = lifecycle.OrderingNone
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if r, err := b.sweeper(t, sweep.Config{}).Pass(b.ctx); err != nil || r.Released != 2 {
		t.Fatalf("pass: %+v %v", r, err)
	}
	spec.Ordering.Mode = lifecycle.OrderingFIFO
	if _, err := b.w.UpdateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	b.complete(t, b.claim(t, ds[2], time.Hour), lifecycle.Delivered("200 OK"))
	b.audit(t)
	b.complete(t, head, lifecycle.Delivered("200 OK"))
	b.complete(t, b.claim(t, ds[1], time.Hour), lifecycle.Delivered("200 OK"))
	b.audit(t)
}

// laneTarget creates the target spec, "hl7", and a route from source
// "erp" for any parties to it.
func (b *bundle) laneTarget(t *testing.T, spec lifecycle.Target) {
	t.Helper()
	if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "hl7"}, admin); err != nil {
		t.Fatal(err)
	}
}

// ingestKeyed stores and dispatches a message of ordering key "k"; it
// returns its delivery.
func (b *bundle) ingestKeyed(t *testing.T) projection.Delivery {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"), OrderingKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return m.Deliveries[0]
}

// TestPassLetsGoALaneLeftOwed: a journal in which a lane's head settled
// without passing the lane on, as an earlier build could write one,
// rebuilds into a lane stuck behind its delivered head, which the audit
// names. A sweep pass lets the first delivery waiting go, after that head,
// and the rest of the lane follows in order; the audit is then clean.
func TestPassLetsGoALaneLeftOwed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.laneTarget(t, lifecycle.Target{Name: "hl7", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}})
	ds := []projection.Delivery{b.ingestKeyed(t), b.ingestKeyed(t), b.ingestKeyed(t)}
	b.complete(t, b.claim(t, ds[0], time.Hour), lifecycle.Delivered("200 OK"))
	// The pass-on is the last event of its message's stream: without it,
	// the journal is one an earlier build wrote.
	tx, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	for _, sql := range []string{`ALTER TABLE journal DISABLE TRIGGER journal_removal`,
		`DELETE FROM journal WHERE delivery_id = '` + ds[1].ID.String() + `' AND kind = '` + string(journal.KindDeliveryUnblocked) + `'`,
		`ALTER TABLE journal ENABLE TRIGGER journal_removal`} {
		if _, err := tx.Exec(b.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	r, err := projection.Rebuild(b.ctx, b.db)
	if err != nil || len(r.Violations) != 1 || !strings.Contains(r.Violations[0].Problem, "were not let go") {
		t.Fatalf("rebuild: %v %+v", err, r)
	}
	if got := b.delivery(t, ds[1]); got.State != lifecycle.StateBlocked {
		t.Fatalf("the second of the lane is %s after the rebuild", got.State)
	}
	b.wake.take(t)
	s := b.sweeper(t, sweep.Config{})
	if r, err := s.Pass(b.ctx); err != nil || r.Released != 1 {
		t.Fatalf("pass: %+v %v", r, err)
	}
	if woken := b.wake.take(t); len(woken) != 1 || woken[ds[1].ID] == nil {
		t.Errorf("wake-ups of the pass: %v", woken)
	}
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{}) {
		t.Fatalf("second pass: %+v %v", r, err)
	}
	b.audit(t)
	for i, d := range ds[1:] {
		if got := b.delivery(t, d); got.State != lifecycle.StateQueued {
			t.Fatalf("delivery %d of the lane is %s when its turn came", i+2, got.State)
		}
		if i == 0 {
			if got := b.delivery(t, ds[2]); got.State != lifecycle.StateBlocked {
				t.Fatalf("the third of the lane is %s behind the second", got.State)
			}
		}
		b.complete(t, b.claim(t, d, time.Hour), lifecycle.Delivered("200 OK"))
	}
	b.audit(t)
}
