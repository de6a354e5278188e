package workers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// TestRotationReachesTheWorker: a rotation changes the target's
// definition, so its worker reloads the keys and signs with both during
// the grace; once the grace ends, by the process's clock, the old key
// stops signing without any change of the definition.
func TestRotationReachesTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, b.httpTarget("web"))
	rt := b.runtime(t, 0)
	// deliver sends a message and returns the signature header of its
	// delivery's attempt.
	deliver := func(i int) http.Header {
		m, _, err := b.w.Ingest(b.ctx, newMessage(i))
		if err != nil {
			t.Fatal(err)
		}
		b.waitStatus(t, lifecycle.StatusDelivered, m)
		b.sink.mu.Lock()
		defer b.sink.mu.Unlock()
		return b.sink.headers.Clone()
	}
	signatures := func(h http.Header) int { return len(strings.Fields(h.Get(targets.HeaderWebhookSignature))) }
	if n := signatures(deliver(0)); n != 1 {
		t.Fatalf("%d signatures before the rotation", n)
	}
	if _, err := b.w.RotateTargetKey(b.ctx, "web", time.Hour, "", admin); err != nil {
		t.Fatal(err)
	}
	rt.ConfigChanged()
	i := 1
	testpoll.Until(t, "an attempt signed by both keys", func() bool { i++; return signatures(deliver(i)) == 2 })
	b.clock.Advance(time.Hour)
	if n := signatures(deliver(i + 1)); n != 1 {
		t.Fatalf("%d signatures after the grace", n)
	}
	b.audit(t)
}
