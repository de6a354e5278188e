package workers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/workers"
)

// The runtime benchmark's knobs, as test flags (after -args).
var (
	benchMessages    = flag.Int("waybill.messages", 5000, "messages per pass of BenchmarkRuntime")
	benchRate        = flag.Float64("waybill.rate", 0, "messages/s offered by BenchmarkRuntime/half; 0 is half of what BenchmarkRuntime/saturated measured")
	benchConcurrency = flag.Int("waybill.concurrency", 40, "each target's max_concurrent in BenchmarkRuntime")
	benchPool        = flag.Int("waybill.pool", 16, "the pool size (pgxpool MaxConns) of the Writer and the runtime; 0 is pgxpool's default, max(4, NumCPU)")
)

const (
	// benchIngesters ingest side by side, so ingest is not the bottleneck.
	benchIngesters = 16
	// benchDeadline bounds one pass, from the first ingest to the last
	// delivery.
	benchDeadline = 3 * time.Minute
	// benchWarmup messages go through before the timing, to open the
	// connections and prepare the statements.
	benchWarmup = 200
)

// saturatedRate is the best messages/s a saturated run of this process
// measured, for the half-load runs that follow.
var saturatedRate atomic.Uint64

// BenchmarkRuntime measures the delivery runtime end to end: ingest with a
// real clock, two http targets (max_concurrent 40, -waybill.concurrency)
// served by a loopback sink, the Runtime on an embedded NATS server and the
// sweep beside it, as in a server, until every message is delivered.
//
// saturated ingests N messages (-waybill.messages, 5,000) from 16 goroutines
// as fast as they go and reports messages/s and deliveries/s (N and 2N over
// the time from the first ingest to the last delivery) and the
// ingest-to-delivered latency. half offers half the best saturated rate of
// the run (or -waybill.rate) at a fixed pace and reports the latency there.
// A message's delivered time is the recorded_at of its last
// delivery.attempted in the journal (the Writer's clock when it decided,
// one round trip before the commit); its start is when its Ingest
// returned. Each run starts with a warm-up of 200 messages, not measured.
//
// The other metrics say what bounds it: round trips to PostgreSQL per
// delivery (queries and batches; begin and commit count as queries; the
// prepares pgx pipelines before a batch are not seen), write batches that
// lost a race and were rolled back, wake-ups the workers dropped, wake-ups
// whose delivery was already taken, deliveries the sweep changed, and CPU
// (percent of one core) of this process (runtime, NATS, sink, ingest), of
// the PostgreSQL server, and of everything else on the machine, which says
// how far other jobs disturbed the run.
//
//	go test -run '^$' -bench Runtime -benchtime 1x -count 3 -timeout 30m ./workers/
func BenchmarkRuntime(b *testing.B) {
	b.Run("saturated", func(b *testing.B) {
		r := runtimeBench(b, 0)
		if rate := r.msgsPerSec(); rate > math.Float64frombits(saturatedRate.Load()) {
			saturatedRate.Store(math.Float64bits(rate))
		}
	})
	b.Run("half", func(b *testing.B) {
		rate := *benchRate
		if rate <= 0 {
			rate = math.Float64frombits(saturatedRate.Load()) / 2
		}
		if rate <= 0 {
			b.Fatal("no rate: run BenchmarkRuntime/saturated first or give -args -waybill.rate=N")
		}
		runtimeBench(b, rate)
	})
}

// runtimeBench runs b.N passes of benchMessages messages on one setup,
// each offered at rate messages/s (0: as fast as ingest goes), and reports
// their totals.
func runtimeBench(b *testing.B, rate float64) *benchTotals {
	env := newBenchEnv(b)
	env.pass(b, benchWarmup, 0)
	var t benchTotals
	for b.Loop() {
		t.add(env.pass(b, *benchMessages, rate))
	}
	t.report(b, rate)
	b.ReportMetric(float64(env.pool), "pool-conns")
	return &t
}

type benchEnv struct {
	ctx     context.Context
	db      *pgxpool.Pool // the runtime's and the Writer's, traced
	harness *pgxpool.Pool // the benchmark's own queries, not counted
	trace   *countingTracer
	w       *commands.Writer
	reg     *prometheus.Registry
	pgPID   int // the postmaster, 0 when it cannot be watched
	pool    int // the traced pool's size
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	env := &benchEnv{ctx: b.Context(), trace: &countingTracer{}, reg: prometheus.NewRegistry()}
	url := dbtest.URL(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	if *benchPool > 0 {
		cfg.MaxConns = int32(*benchPool)
	}
	cfg.ConnConfig.Tracer = env.trace
	cfg.AfterConnect = schema.AfterConnect
	env.pool = int(cfg.MaxConns)
	if env.db, err = pgxpool.NewWithConfig(env.ctx, cfg); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.db.Close)
	if env.harness, err = pgxpool.New(env.ctx, url); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.harness.Close)
	if err := schema.Ensure(env.ctx, env.db); err != nil {
		b.Fatal(err)
	}
	if env.pgPID, err = postmasterPID(env.ctx, env.harness); err != nil {
		b.Logf("the server's CPU is not measured: %v", err)
	}

	ns := natsserver.New(natsserver.Config{})
	b.Cleanup(func() { ns.Stop(context.Background()) })
	if err := ns.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	nc, err := ns.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	metrics := workers.NewMetrics(env.reg)
	// The real clock: no testclock here.
	env.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Logger: quiet}, DB: env.db, Notifier: workers.NewPublisher(nc, quiet, metrics)})
	if err != nil {
		b.Fatal(err)
	}

	// A sink that takes every request and answers 200 at once.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(sink.Close)
	cfgJSON, _ := json.Marshal(map[string]string{"url": sink.URL})
	for _, name := range []string{"alpha", "beta"} {
		spec := lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: cfgJSON, MaxConcurrent: *benchConcurrency}
		if _, err := env.w.CreateTarget(env.ctx, spec, admin); err != nil {
			b.Fatal(err)
		}
		if _, err := env.w.CreateRoute(env.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
			b.Fatal(err)
		}
	}

	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: service.Base{Logger: quiet}, Writer: env.w, NATS: nc, Metrics: metrics})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Start(env.ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Stop(context.Background()) })
	// The sweep runs beside the runtime as in a server: it wakes a
	// delivery whose wake-up was lost once it is due (10 s after its
	// dispatch).
	sw, err := sweep.New(sweep.Config{Base: service.Base{Logger: quiet}, Writer: env.w, DB: env.db, Registerer: env.reg})
	if err != nil {
		b.Fatal(err)
	}
	if err := sw.Start(env.ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sw.Stop(context.Background()) })
	return env
}

// passResult is what one pass measured.
type passResult struct {
	messages int
	elapsed  time.Duration // first ingest to last delivery.attempted
	ingest   time.Duration // first ingest to last Ingest returned
	latency  []time.Duration
	trace    traceCounts
	metrics  map[string]float64
	cpu      cpuSample // spent during the pass
}

// benchPayload is the body of every message: 512 bytes.
var benchPayload = bytes.Repeat([]byte("waybill "), 64)

// pass ingests n messages at rate messages/s (0: as fast as the ingesters
// go) and waits until all are delivered.
func (env *benchEnv) pass(b *testing.B, n int, rate float64) passResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(env.ctx, benchDeadline)
	defer cancel()
	metricsBefore := gather(b, env.reg)
	traceBefore := env.trace.counts()
	cpuBefore := env.sampleCPU()

	ids := make([]string, n)
	returned := make([]time.Time, n)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		ingErr  error
	)
	start := time.Now()
	for range benchIngesters {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
				}
				m, _, err := env.w.Ingest(ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
					ContentType: "text/plain", Payload: benchPayload})
				if err != nil {
					errOnce.Do(func() { ingErr = err })
					return
				}
				returned[i] = time.Now()
				ids[i] = journal.MessageStream(m.ID)
			}
		})
	}
	wg.Wait()
	if ingErr != nil {
		b.Fatal(ingErr)
	}
	ingestEnd := time.Now()

	// The runtime's own counter tells when every attempt is recorded, so
	// the wait costs the database nothing; the journal confirms it below.
	for gather(b, env.reg)["waybill_attempts_total"]-metricsBefore["waybill_attempts_total"] < float64(2*n) {
		if ctx.Err() != nil {
			env.logStuck(b)
			b.Fatalf("waiting for %d deliveries: %v", 2*n, ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cpu := env.sampleCPU().minus(cpuBefore)
	trace := env.trace.counts().minus(traceBefore)
	metrics := gather(b, env.reg)
	for k, v := range metricsBefore {
		metrics[k] -= v
	}

	rows, err := env.harness.Query(ctx, `SELECT stream, max(recorded_at) FROM journal
		WHERE stream = ANY($1) AND kind = $2 GROUP BY stream`, ids, journal.KindDeliveryAttempted)
	if err != nil {
		b.Fatal(err)
	}
	deliveredAt := make(map[string]time.Time, n)
	var (
		stream string
		at     time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&stream, &at}, func() error {
		deliveredAt[stream] = at
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	r := passResult{messages: n, ingest: ingestEnd.Sub(start), trace: trace, metrics: metrics, cpu: cpu,
		latency: make([]time.Duration, n)}
	var last time.Time
	for i, id := range ids {
		at, ok := deliveredAt[id]
		if !ok {
			b.Fatalf("message %s: no delivery.attempted", id)
		}
		r.latency[i] = at.Sub(returned[i])
		if at.After(last) {
			last = at
		}
	}
	r.elapsed = last.Sub(start)
	return r
}

// benchTotals adds up the passes of one benchmark.
type benchTotals struct {
	passes   int
	messages int
	elapsed  time.Duration
	ingest   time.Duration
	latency  []time.Duration
	trace    traceCounts
	metrics  map[string]float64
	cpu      cpuSample
}

func (t *benchTotals) add(r passResult) {
	t.passes++
	t.messages += r.messages
	t.elapsed += r.elapsed
	t.ingest += r.ingest
	t.latency = append(t.latency, r.latency...)
	t.trace = t.trace.plus(r.trace)
	if t.metrics == nil {
		t.metrics = map[string]float64{}
	}
	for k, v := range r.metrics {
		t.metrics[k] += v
	}
	if t.passes == 1 {
		t.cpu = r.cpu
	} else {
		t.cpu = t.cpu.plus(r.cpu)
	}
}

func (t *benchTotals) msgsPerSec() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.messages) / t.elapsed.Seconds()
}

func (t *benchTotals) report(b *testing.B, rate float64) {
	if t.passes == 0 {
		return
	}
	deliveries := float64(2 * t.messages)
	slices.Sort(t.latency)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if rate > 0 {
		b.ReportMetric(rate, "offered-msgs/s")
	}
	b.ReportMetric(t.msgsPerSec(), "msgs/s")
	b.ReportMetric(2*t.msgsPerSec(), "deliveries/s")
	b.ReportMetric(float64(t.messages)/t.ingest.Seconds(), "ingested-msgs/s")
	b.ReportMetric(ms(percentile(t.latency, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(t.latency, 99)), "p99-ms")
	b.ReportMetric(ms(t.latency[len(t.latency)-1]), "max-ms")
	// Round trips and lost races per delivery include the ingest's share.
	b.ReportMetric(float64(t.trace.roundTrips())/deliveries, "roundtrips/delivery")
	b.ReportMetric(float64(t.trace.batchesFailed)/deliveries, "rollbacks/delivery")
	b.ReportMetric(float64(t.trace.prepares)/deliveries, "prepares/delivery")
	b.ReportMetric(t.metrics["waybill_wakeups_dropped_total"]/deliveries, "dropped/delivery")
	b.ReportMetric(t.metrics["waybill_claims_total:conflict"]/deliveries, "conflicts/delivery")
	b.ReportMetric(t.metrics["waybill_sweep_rows_total"], "swept")
	wall := t.elapsed.Seconds()
	b.ReportMetric(100*t.cpu.self/wall, "go-cpu-%")
	if t.cpu.pgOK {
		b.ReportMetric(100*t.cpu.pg/wall, "pg-cpu-%")
		// CPU per delivery, ingest's share included, varies less with
		// what else runs on the machine than the rates do.
		b.ReportMetric(1000*(t.cpu.self+t.cpu.pg)/deliveries, "cpu-ms/delivery")
	}
	if t.cpu.hostOK {
		other := t.cpu.hostBusy - t.cpu.self
		if t.cpu.pgOK {
			other -= t.cpu.pg
		}
		b.ReportMetric(100*max(other, 0)/wall, "other-cpu-%")
	}
}

// percentile is the p-th percentile of sorted, by the nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

// gather sums each counter of reg over its labels.
func gather(b *testing.B, reg *prometheus.Registry) map[string]float64 {
	families, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			out[f.GetName()] += m.GetCounter().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					out[f.GetName()+":"+l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// countingTracer counts what the pool sends to PostgreSQL: every query and
// batch is one round trip, and so is each prepare.
type countingTracer struct {
	queries, batches, batchesFailed, prepares atomic.Int64
}

type traceCounts struct {
	queries, batches, batchesFailed, prepares int64
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}

func (c *countingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *countingTracer) TraceBatchEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	var pgErr *pgconn.PgError
	if errors.As(data.Err, &pgErr) {
		c.batchesFailed.Add(1)
	}
}

func (c *countingTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}

func (c *countingTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *countingTracer) counts() traceCounts {
	return traceCounts{c.queries.Load(), c.batches.Load(), c.batchesFailed.Load(), c.prepares.Load()}
}

func (t traceCounts) roundTrips() int64 { return t.queries + t.batches + t.prepares }

func (t traceCounts) minus(o traceCounts) traceCounts {
	return traceCounts{t.queries - o.queries, t.batches - o.batches, t.batchesFailed - o.batchesFailed, t.prepares - o.prepares}
}

func (t traceCounts) plus(o traceCounts) traceCounts {
	return traceCounts{t.queries + o.queries, t.batches + o.batches, t.batchesFailed + o.batchesFailed, t.prepares + o.prepares}
}

// cpuSample holds CPU seconds: this process's, the PostgreSQL server's
// (the postmaster, its children and the children it has reaped) and the
// machine's busy time, each read from /proc where it can be.
type cpuSample struct {
	self, pg, hostBusy float64
	pgOK, hostOK       bool
}

func (c cpuSample) minus(o cpuSample) cpuSample {
	return cpuSample{c.self - o.self, c.pg - o.pg, c.hostBusy - o.hostBusy, c.pgOK && o.pgOK, c.hostOK && o.hostOK}
}

func (c cpuSample) plus(o cpuSample) cpuSample {
	return cpuSample{c.self + o.self, c.pg + o.pg, c.hostBusy + o.hostBusy, c.pgOK && o.pgOK, c.hostOK && o.hostOK}
}

func (env *benchEnv) sampleCPU() cpuSample {
	var s cpuSample
	s.self = cpustat.Self()
	if env.pgPID > 0 {
		s.pg, s.pgOK = cpustat.ProcessTree(env.pgPID)
	}
	s.hostBusy, s.hostOK = cpustat.HostBusy()
	return s
}

// postmasterPID reads the server's pid from its data directory; an error
// when the server is not on this machine or its directory is not readable.
func postmasterPID(ctx context.Context, db *pgxpool.Pool) (int, error) {
	var dir string
	if err := db.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dir); err != nil {
		return 0, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: %w", err)
	}
	if !cpustat.Exists(pid) {
		return 0, fmt.Errorf("no process %d here", pid)
	}
	return pid, nil
}

// logStuck logs the deliveries not delivered, by state and last error.
func (env *benchEnv) logStuck(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := env.harness.Query(ctx, `SELECT state, last_error, attempts, dispatch_count, count(*)
		FROM deliveries WHERE state <> 'delivered' GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC LIMIT 20`)
	if err != nil {
		b.Logf("deliveries not delivered: %v", err)
		return
	}
	var (
		state, lastError              string
		attempts, dispatches, howMany int
	)
	_, err = pgx.ForEachRow(rows, []any{&state, &lastError, &attempts, &dispatches, &howMany}, func() error {
		b.Logf("%d deliveries %s after %d attempts, %d dispatches: %q", howMany, state, attempts, dispatches, lastError)
		return nil
	})
	if err != nil {
		b.Logf("deliveries not delivered: %v", err)
	}
	b.Logf("metrics: %v", gather(b, env.reg))
}
