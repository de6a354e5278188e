package alerts_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
)

// TestAlertsOutlastADatabaseOutage: the database goes away after the
// webhook took an alert and before the alerter marked it sent, and an
// alert is raised meanwhile. Once the database is back, the first alert is
// marked without being sent again, the second is raised and sent, and each
// went once to each channel.
func TestAlertsOutlastADatabaseOutage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	got := e.subscribe(t, "waybill.alerts.>")
	proxy := dbtest.NewProxy(t, e.db)
	cut := make(chan struct{})
	e.hook.setTaken(func(string) {
		select {
		case <-cut:
		default:
			proxy.Cut()
			close(cut)
		}
	})
	// The alerter reaches the database through the proxy; the test does
	// not.
	a, err := alerts.New(alerts.Config{DB: proxy.Pool(t), NATS: e.connect(t), WebhookURL: e.hook.URL,
		SendBackoff: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })

	e.notRouted(t)
	<-cut
	e.notRouted(t)
	refused := proxy.Refused()
	testpoll.Until(t, "the alerter to try again", func() bool { return proxy.Refused() >= refused+2 })
	proxy.Restore()

	testpoll.Until(t, "both alerts marked sent both ways", func() bool { return e.allSent(t, 2) })
	keys, accepted := e.hook.state()
	if len(keys) != 2 || accepted != 2 {
		t.Errorf("webhook requests %v, %d accepted; want each of 2 alerts once", keys, accepted)
	}
	ids := map[string]int{}
	for _, m := range got.all() {
		ids[m.Header.Get(nats.MsgIdHdr)]++
	}
	if len(ids) != 2 || len(got.all()) != 2 {
		t.Errorf("on NATS: %v; want each of 2 alerts once", ids)
	}
}
