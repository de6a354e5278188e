package workers_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// TestAuditCleanWhileWorkIsInFlight runs the real workers on the real clock,
// whose readings have nanoseconds, against a failing target (retrying,
// with jittered retry times), a slow one (delivering) and one that awaits
// receipts, and audits the whole journal while their deliveries are in
// those states, then again once the slow attempts end.
func TestAuditCleanWhileWorkIsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Logger: quiet}, DB: b.db, Notifier: workers.NewPublisher(b.nc, nil, b.metrics)})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	b.sink.setAnswer(func(_ int, _ http.ResponseWriter, r *http.Request) int {
		switch {
		case strings.HasSuffix(r.URL.Path, "/fail"):
			return http.StatusServiceUnavailable
		case strings.HasSuffix(r.URL.Path, "/slow"):
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return http.StatusOK
	})
	spec := func(name, path string) lifecycle.Target {
		cfg, _ := json.Marshal(map[string]string{"url": b.sink.URL + path})
		return lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: cfg}
	}
	receipts := spec("partner", "/ok")
	receipts.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Hour)}
	for _, target := range []lifecycle.Target{spec("failing", "/fail"), spec("slow", "/slow"), receipts} {
		if _, err := w.CreateTarget(b.ctx, target, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: target.Name}, admin); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Logger: quiet}, Writer: w, NATS: b.nc, DrainGrace: time.Millisecond,
		Metrics: b.metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(b.ctx)

	var ms []*projection.Message
	for i := range 5 {
		m, _, err := w.Ingest(b.ctx, newMessage(i))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	want := map[string]lifecycle.DeliveryState{
		"failing": lifecycle.StateRetrying, "slow": lifecycle.StateDelivering, "partner": lifecycle.StateAwaitingAck,
	}
	for _, m := range ms {
		for _, d := range m.Deliveries {
			b.waitState(t, d.ID, want[d.Target])
		}
	}
	b.audit(t)
	close(release)
	for _, m := range ms {
		for _, d := range m.Deliveries {
			if d.Target == "slow" {
				b.waitState(t, d.ID, lifecycle.StateDelivered)
			}
		}
	}
	b.audit(t)
}
