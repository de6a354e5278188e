package commands_test

import (
	"errors"
	"testing"
	"time"

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
