package commands_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// TestRetriedOutcomeReturnsItsClaim: an outcome that freed the next
// delivery of its lane and claimed it commits, but its answer is lost. The
// try made again finds the outcome's claim gone and returns the claim the
// first try made, as that try would have; once that claim is settled,
// a try finds nothing and the claim is lost.
func TestRetriedOutcomeReturnsItsClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t, "hl7", lifecycle.OnFailureBlock)
	a1, a2 := b.ingestKeyed(t, "patient-1"), b.ingestKeyed(t, "patient-1")
	c, err := b.w.Claim(b.ctx, a1.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proxy, w := b.proxied(t)
	proxy.LoseNextCommit()
	outcome := lifecycle.Delivered("200")
	if _, _, err := w.CompleteAndClaimNext(b.ctx, a1.Deliveries[0].ID, c.Token, outcome, time.Minute, false); !commands.Transient(err) {
		t.Fatalf("the try whose answer was lost: %v", err)
	}
	m, next, err := w.CompleteAndClaimNext(b.ctx, a1.Deliveries[0].ID, c.Token, outcome, time.Minute, false)
	if err != nil || m != nil || next == nil {
		t.Fatalf("the try again: %v, message %v, next %v", err, m, next)
	}
	held, err := projection.Load(b.ctx, b.db, a2.ID)
	if err != nil {
		t.Fatal(err)
	}
	d := held.Deliveries[0]
	if next.Delivery.ID != d.ID || next.Token != d.ClaimToken || d.State != lifecycle.StateDelivering || next.Attempt != 1 ||
		!next.LeaseEnd.Equal(d.LeaseEnd) || next.Message.ID != a2.ID || string(next.Payload) != string(newMessage().Payload) {
		t.Fatalf("the claim returned %+v, the delivery %+v", next, d)
	}
	if _, err := w.Complete(b.ctx, next.Delivery.ID, next.Token, outcome); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.CompleteAndClaimNext(b.ctx, a1.Deliveries[0].ID, c.Token, outcome, time.Minute, false); !errors.Is(err, commands.ErrClaimLost) {
		t.Fatalf("a try once the claim it made is settled: %v", err)
	}
	b.audit(t)
}

// TestLostAnswerOfAClaim: a claim commits but its answer is lost; Claim
// finds it held by its token and returns it, as the commit would have.
func TestLostAnswerOfAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "billing")
	m := b.ingest(t)
	proxy, w := b.proxied(t)
	proxy.LoseNextCommit()
	c, err := w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatalf("a claim whose answer was lost: %v", err)
	}
	held, err := projection.Load(b.ctx, b.db, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	d := held.Deliveries[0]
	if c.Delivery.ID != d.ID || c.Token != d.ClaimToken || d.State != lifecycle.StateDelivering || c.Attempt != 1 ||
		!c.LeaseEnd.Equal(d.LeaseEnd) || string(c.Payload) != string(newMessage().Payload) {
		t.Fatalf("the claim returned %+v, the delivery %+v", c, d)
	}
	b.audit(t)
}

// TestLostAnswerOfACallbackClaim: a callback's claim, by a catch-up and
// then by its message's id, commits but its answer is lost; each is found
// held by its token and returned, as the commit would have.
func TestLostAnswerOfACallbackClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "billing")
	in := newMessage()
	in.CallbackURL = "https://erp.example/outcome"
	m, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	proxy, w := b.proxied(t)
	held := func(claim commands.CallbackClaim, attempt int) {
		t.Helper()
		got, err := projection.Load(b.ctx, b.db, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		cb := got.Callback
		if cb.State != lifecycle.StateDelivering || claim.Token != cb.ClaimToken || claim.Attempt != attempt ||
			!claim.LeaseEnd.Equal(cb.LeaseEnd) || claim.Callback.URL != in.CallbackURL {
			t.Fatalf("the claim returned %+v, the callback %+v", claim, cb)
		}
	}

	proxy.LoseNextCommit()
	claims, err := w.ClaimDueCallbacks(b.ctx, 5, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("a catch-up whose answer was lost: %v, %v", claims, err)
	}
	held(claims[0], 1)
	if _, err := w.ReleaseCallback(b.ctx, m.ID, claims[0].Token, false, "the test gives it back"); err != nil {
		t.Fatal(err)
	}
	proxy.LoseNextCommit()
	claim, err := w.ClaimCallback(b.ctx, m.ID, time.Minute)
	if err != nil {
		t.Fatalf("a claim whose answer was lost: %v", err)
	}
	held(claim, 1)
	b.audit(t)
}

// proxied returns a proxy of the bundle's database and a Writer whose
// connections go through it, on the bundle's clock.
func (b *bundle) proxied(t *testing.T) (*dbtest.Proxy, *commands.Writer) {
	t.Helper()
	proxy := dbtest.NewProxy(t, b.db)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now}, DB: proxy.Pool(t), Notifier: b.wake})
	if err != nil {
		t.Fatal(err)
	}
	return proxy, w
}

// TestLostAnswerOfAnIngest: an ingest, alone or in a batch, commits but
// its answer is lost; the Writer finds each message stored and returns
// it as created, so a sender is never told to send again what is stored.
func TestLostAnswerOfAnIngest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "billing")
	proxy, w := b.proxied(t)
	stored := func(payload string) int {
		t.Helper()
		var n int
		if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM payloads WHERE body = $1`, []byte(payload)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	in := newMessage()
	in.Payload = []byte("the answer to this ingest is lost")
	proxy.LoseAnswerTo(in.Payload)
	b.wake.take()
	m, created, err := w.Ingest(b.ctx, in)
	if err != nil || !created || m == nil || m.Source != in.Source || len(m.Deliveries) != 1 {
		t.Fatalf("an ingest whose answer was lost: %v, created %v, %+v", err, created, m)
	}
	// Its delivery is woken, as the commit's answer would have had it.
	if woken := b.wake.take(); len(woken) != 1 || woken[0].DeliveryID != m.Deliveries[0].ID {
		t.Errorf("wake-ups %+v", woken)
	}
	if n := stored(string(in.Payload)); n != 1 {
		t.Fatalf("%d messages stored", n)
	}

	ins := []commands.NewMessage{newMessage(), newMessage()}
	ins[0].Payload, ins[1].Payload = []byte("first of a batch whose answer is lost"), []byte("second of a batch whose answer is lost")
	proxy.LoseAnswerTo(ins[1].Payload)
	for i, got := range w.IngestMany(b.ctx, ins) {
		if got.Err != nil || !got.Created || got.Message == nil {
			t.Fatalf("message %d of a batch whose answer was lost: %+v", i, got)
		}
		if n := stored(string(ins[i].Payload)); n != 1 {
			t.Fatalf("message %d: %d stored", i, n)
		}
	}
	b.audit(t)
}

// TestIngestMaybeStored: an ingest whose connection is lost once its
// writes were sent, and whose Writer then cannot reach the database to
// look, reports that the message may be stored, not that it is not.
func TestIngestMaybeStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "billing")
	proxy, w := b.proxied(t)
	w.SetCut(func(at string, _ *pgx.Batch) {
		if at == "appended" {
			proxy.Cut()
		}
	})
	if _, _, err := w.Ingest(b.ctx, newMessage()); !errors.Is(err, commands.ErrMaybeStored) {
		t.Fatalf("an ingest lost with its database: %v", err)
	}
	w.SetCut(nil)
	proxy.Restore()
	// Nothing was stored, as the first try never left.
	if _, _, err := w.Ingest(b.ctx, newMessage()); err != nil {
		t.Fatal(err)
	}
	b.audit(t)
}
