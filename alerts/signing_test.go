package alerts_test

import (
	"context"
	"testing"
	"time"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/targets"
)

// TestWebhookIsSigned: the alert webhook's requests carry the Standard
// Webhooks headers, the alert's id as the webhook-id on every try, and
// verify with the alerts' own key, made when the alerter starts.
func TestWebhookIsSigned(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.hook.setFail(1)
	a, err := alerts.New(alerts.Config{DB: e.db, NATS: e.connect(t), WebhookURL: e.hook.URL, Base: service.Base{Now: e.clock.Now},
		WebhookKeys: func(ctx context.Context) ([]targets.Key, error) { return e.w.OwnKeys(ctx, lifecycle.KeyOwnerAlerts) },
		SendBackoff: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	keys, err := e.w.OwnKeys(e.ctx, lifecycle.KeyOwnerAlerts)
	if err != nil || len(keys) != 1 {
		t.Fatalf("the alerts' key: %+v, %v", keys, err)
	}
	e.notRouted(t)
	testpoll.Until(t, "the alert marked sent", func() bool { return e.allSent(t, 1) })
	e.hook.mu.Lock()
	headers, bodies, ids := e.hook.headers, e.hook.bodies, e.hook.keys
	e.hook.mu.Unlock()
	if len(headers) != 2 {
		t.Fatalf("%d requests", len(headers))
	}
	for i, h := range headers {
		if h.Get(targets.HeaderWebhookID) != ids[i] || ids[i] != ids[0] {
			t.Fatalf("request %d: webhook-id %q, the alert %q", i, h.Get(targets.HeaderWebhookID), ids[0])
		}
		if err := targets.Verify(h, bodies[i], keys[0], e.clock.Now()); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if targets.Verify(h, bodies[i], keys[0], e.clock.Now().Add(6*time.Minute)) == nil {
			t.Fatalf("request %d verifies six minutes later", i)
		}
	}
}
