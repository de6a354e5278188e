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
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/workers"
)

// workerProcessEnv, set to a database URL, makes the test binary a worker
// process: a Runtime on that database and the NATS server at
// workerNATSEnv, until SIGTERM, on the real clock put forward by the
// duration in workerSkipEnv, if any.
const (
	workerProcessEnv = "WAYBILL_TEST_WORKER_PROCESS"
	workerNATSEnv    = "WAYBILL_TEST_WORKER_NATS"
	workerSkipEnv    = "WAYBILL_TEST_WORKER_SKIP"
)

// skipped is the real clock put forward by skip.
func skipped(skip time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(skip) }
}

func workerProcess() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := quiet
	fail := func(err error) int {
		log.Error("worker process", "err", err)
		return 1
	}
	var skip time.Duration
	if v := os.Getenv(workerSkipEnv); v != "" {
		var err error
		if skip, err = time.ParseDuration(v); err != nil {
			return fail(err)
		}
	}
	base := service.Base{Now: skipped(skip), Logger: log}
	db, err := pgxpool.New(ctx, os.Getenv(workerProcessEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	nc, err := nats.Connect(os.Getenv(workerNATSEnv))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: db, Notifier: workers.NewPublisher(nc, log, nil)})
	if err != nil {
		return fail(err)
	}
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: base, Writer: w, NATS: nc})
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
// bundle's database and the NATS server at natsURL, its clock put forward
// by skip.
func startWorkerProcess(t *testing.T, b *bundle, natsURL string, skip time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerProcessEnv+"="+b.db.Config().ConnString(), workerNATSEnv+"="+natsURL,
		workerSkipEnv+"="+skip.String())
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
// in the middle of 1,000 deliveries and starts another: the attempts the
// dead process held are taken back at their lease end, and in the end
// every message is delivered, each delivery recorded delivered exactly
// once, and the audit finds nothing. Every clock is the real one; the
// second process's and the sweep's are put forward by one lease, so that
// the dead process's leases have run out for them from the start while
// theirs agree with each other: a sweep ahead of the live process would
// take its claims back from under it.
func TestKilledWorkerProcessLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The processes and this test share a NATS server reached by URL, so
	// the wake-ups of the test's sweep reach the worker process.
	ns := natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
	t.Cleanup(func() { ns.Stop(context.Background()) })
	if err := ns.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var err error
	if b.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.nc.Close)
	// No max_concurrent: the claims the killed process held would hold
	// the target's slots across the cluster until their lease ends.
	spec := b.httpTarget("web")
	b.target(t, spec)
	b.sink.setAnswer(func(int, http.ResponseWriter, *http.Request) int {
		time.Sleep(time.Millisecond)
		return http.StatusOK
	})
	// The process reads the real clock; so do the ingests.
	b.clock = testclock.New(time.Now().UTC())
	b.w = b.writer(t, workers.NewPublisher(b.nc, nil, nil))
	b.ingest(t, 1000)

	first := startWorkerProcess(t, b, ns.ClientURL(), 0)
	testpoll.Until(t, "the first process to be under way", func() bool { return b.sink.requests() >= 200 })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	// The new process's catch-up takes the dead one's claims whose lease
	// has run out; the sweep takes those the dead one's last batch, sent
	// before the kill, committed after that catch-up, and wakes them for
	// the new process, once it has done all it can.
	skip := spec.WithDefaults().Lease() + time.Second
	startWorkerProcess(t, b, ns.ClientURL(), skip)
	base := service.Base{Now: skipped(skip), Logger: quiet}
	sw, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: b.db, Notifier: workers.NewPublisher(b.nc, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sweep.New(sweep.Config{Base: base, Writer: sw, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	var (
		last    int
		settled = time.Now()
	)
	testpoll.Until(t, "1000 messages delivered", func() bool {
		var open, delivering int
		if err := b.db.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE state <> 'delivered'),
			count(*) FILTER (WHERE state = 'delivering') FROM deliveries`).Scan(&open, &delivering); err != nil {
			t.Fatal(err)
		}
		if open != last {
			last, settled = open, time.Now()
		}
		if open > 0 && open == delivering && time.Since(settled) > 200*time.Millisecond {
			if _, err := s.Pass(b.ctx); err != nil {
				t.Fatal(err)
			}
		}
		return open == 0
	})

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
