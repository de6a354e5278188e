package workers_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testlog"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// TestOutcomesOutlastADatabaseOutage: the database goes away for longer
// than one try at recording may take, while the sink takes every attempt.
// Once it is back, every outcome is recorded, each delivery having been
// sent once, and the audit finds nothing. The clock stands still and no
// sweep runs, so no lease ends: the outcomes are the worker's own.
func TestOutcomesOutlastADatabaseOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20
	spec := b.httpTarget("web")
	spec.MaxConcurrent = n
	b.target(t, spec)

	// The runtime reaches the database through the proxy; the test does
	// not.
	proxy := dbtest.NewProxy(t, b.db)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now, Logger: quiet}, DB: proxy.Pool(t), Notifier: workers.NewPublisher(b.nc, nil, b.metrics)})
	if err != nil {
		t.Fatal(err)
	}
	// The workers' log tells how each recording went.
	logs := &testlog.Buffer{}
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Now: b.clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		Writer: w, NATS: b.nc, Metrics: b.metrics})
	if err != nil {
		t.Fatal(err)
	}
	// The sink holds every attempt until the database is away.
	gate := make(chan struct{})
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int {
		<-gate
		return http.StatusOK
	})
	if err := rt.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	ms := b.ingest(t, n)
	testpoll.Until(t, "every attempt under way", func() bool { return b.sink.requests() == n })

	proxy.Cut()
	close(gate)
	testpoll.Until(t, "the sink to take every attempt", func() bool {
		taken := 0
		for _, m := range ms {
			taken += b.sink.count(m.Deliveries[0].ID.String())
		}
		return taken == n
	})
	// The outage lasts for several tries at recording each outcome.
	testpoll.Until(t, "every recording failed and tried again", func() bool {
		return len(logs.Lines(`msg="outcome not recorded yet`)) == n && proxy.Refused() >= 4*n
	})
	var delivering int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM deliveries WHERE state = 'delivering'`).Scan(&delivering); err != nil {
		t.Fatal(err)
	}
	if delivering != n {
		t.Fatalf("%d deliveries delivering during the outage, want %d", delivering, n)
	}
	if proxy.Refused() == 0 {
		t.Fatal("nothing tried to reach the database during the outage")
	}

	proxy.Restore()
	back := time.Now()
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)
	t.Logf("every outcome recorded %v after the database came back", time.Since(back).Round(time.Millisecond))

	// A worker logs its recording once the command returns, after the
	// state it recorded can be read.
	testpoll.Until(t, "every outcome logged as recorded after a failed try", func() bool {
		return len(logs.Lines(`msg="outcome recorded"`)) == n
	})
	for _, m := range ms {
		d := m.Deliveries[0]
		if got := b.sink.count(d.ID.String()); got != 1 {
			t.Errorf("delivery %s sent %d times, want once", d.ID, got)
		}
		want := []journal.Kind{journal.KindDeliveryClaimed, journal.KindDeliveryAttempted}
		if kinds := dbtest.Kinds(t, b.db, d); !slices.Equal(kinds, want) {
			t.Errorf("delivery %s: events %v, want %v", d.ID, kinds, want)
		}
	}
	b.audit(t)
}
