package workers_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/workers"
)

// workerProcessEnv, set to a database URL, makes the test binary a worker
// process: an embedded NATS server and a Runtime on that database, until
// SIGTERM.
const workerProcessEnv = "WAYBILL_TEST_WORKER_PROCESS"

func workerProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := quiet
	fail := func(err error) int {
		log.Error("worker process", "err", err)
		return 1
	}
	db, err := pgxpool.New(ctx, os.Getenv(workerProcessEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	ns, err := natsserver.Start(natsserver.Config{})
	if err != nil {
		return fail(err)
	}
	defer ns.Stop()
	nc, err := ns.Connect()
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	w, err := commands.New(commands.Config{DB: db, Notifier: workers.NewPublisher(nc, log, nil), Logger: log})
	if err != nil {
		return fail(err)
	}
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Writer: w, NATS: nc, Logger: log})
	if err != nil {
		return fail(err)
	}
	if err := rt.Start(ctx); err != nil {
		return fail(err)
	}
	<-ctx.Done()
	rt.Stop(context.Background())
	return 0
}

// startWorkerProcess runs the test binary as a worker process on the
// bundle's database.
func startWorkerProcess(t *testing.T, b *bundle) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerProcessEnv+"="+b.db.Config().ConnString())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestKilledWorkerProcessLosesNothing kills a worker process with SIGKILL
// in the middle of 1,000 deliveries and starts another: the sweep turns
// the attempts the dead process held into retries at their lease end, and
// in the end every message is delivered, each delivery recorded delivered
// exactly once, and the audit finds nothing.
func TestKilledWorkerProcessLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := b.httpTarget("web")
	spec.MaxConcurrent = 10
	b.target(t, spec)
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int {
		time.Sleep(time.Millisecond)
		return http.StatusOK
	})
	// The process reads the real clock; so does this test from here on.
	b.clock = testclock.New(time.Now().UTC())
	b.w = b.writer(t, nil)
	ms := b.ingest(t, 1000)

	first := startWorkerProcess(t, b)
	waitFor(t, "the first process to be under way", func() bool { return b.sink.requests() >= 200 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	// Past the leases of the dead process: they expire and are woken.
	b.clock.Advance(time.Since(b.clock.Now()) + spec.WithDefaults(5).Lease() + time.Second)
	r, err := b.sweeper(t).Pass(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the kill: %d delivered by the sink, sweep %+v", b.sink.requests(), r)

	startWorkerProcess(t, b)
	b.waitStatus(t, lifecycle.StatusDelivered, ms...)

	var delivered, deliveries int
	err = b.db.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM journal WHERE kind = $1 AND payload->'outcome'->>'kind' = 'delivered'),
		(SELECT count(*) FROM deliveries)`, journal.KindDeliveryAttempted).Scan(&delivered, &deliveries)
	if err != nil {
		t.Fatal(err)
	}
	if delivered != deliveries || deliveries != 1000 {
		t.Fatalf("%d deliveries recorded delivered %d times, want 1000 once each", deliveries, delivered)
	}
	b.audit(t)
}
