package retention_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/retention"
	"github.com/waybill/waybill/service"
)

// The benchmarks' knobs, as test flags (after -args).
var (
	benchPerHour = flag.Int("waybill.perhour", 200, "messages per simulated hour of BenchmarkThirtyDays")
	benchRate    = flag.Float64("waybill.rate", 300, "messages/s offered by BenchmarkPassUnderLoad")
	benchBacklog = flag.Int("waybill.backlog", 30000, "settled messages due for removal when BenchmarkPassUnderLoad's pass starts")
	benchSeconds = flag.Int("waybill.seconds", 20, "seconds of load in each phase of BenchmarkPassUnderLoad")
	benchShare   = flag.Float64("waybill.share", 0, "retention's Config.Share in BenchmarkPassUnderLoad; 0 is the default")
	benchBatch   = flag.Int("waybill.batch", 0, "retention's Config.Batch in BenchmarkPassUnderLoad; 0 is the default")
	benchWindow  = flag.Duration("waybill.window", 2*time.Second, "the windows BenchmarkPassUnderLoad's halves take turns in")
	benchBurn    = flag.Duration("waybill.burn", 0, "BenchmarkPassUnderLoad keeps a core busy this long at the start of each window instead of a pass: the control, what any burst of work that long costs the load")
)

// The tables whose size retention bounds.
var benchTables = []string{"journal", "messages", "deliveries", "payloads"}

// BenchmarkThirtyDays runs steady ingest and delivery through the Writer
// for 30 simulated days on the injected clock: every simulated hour,
// -waybill.perhour messages (512 bytes, two targets, one delivery in a
// hundred failing), then a retention pass, with payload_after 1 day,
// settled_after 3 days and failed_after 7 days. Autovacuum checks a table
// once a minute of real time, far more rarely than once a simulated hour,
// so the benchmark does its part: after each hour it vacuums a table with
// more dead rows than 50 and a fifth of its live rows, autovacuum's
// default threshold. It logs the size of the journal, messages,
// deliveries and payloads (tables, indexes and TOAST) each simulated day
// and reports it on days 10, 20 and 30.
//
//	go test -run '^$' -bench ThirtyDays -benchtime 1x -timeout 60m ./retention/
func BenchmarkThirtyDays(b *testing.B) {
	for b.Loop() {
		bd := setup(b)
		target(b, bd, "beta")
		bd.retain(b, 24*time.Hour, 72*time.Hour, 168*time.Hour)
		body := make([]byte, 512)
		var sizes []int64
		var n atomic.Int64
		for hour := 1; hour <= 30*24; hour++ {
			g := &errgroup.Group{}
			g.SetLimit(16)
			for range *benchPerHour {
				g.Go(func() error {
					i := n.Add(1)
					m, _, err := bd.w.Ingest(bd.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: body})
					if err != nil {
						return err
					}
					for j, d := range m.Deliveries {
						c, err := bd.w.Claim(bd.ctx, d.ID, time.Minute)
						if err != nil {
							return err
						}
						o := lifecycle.Delivered("200")
						if i%100 == 0 && j == 0 {
							o = lifecycle.Failed("400")
						}
						if _, err := bd.w.Complete(bd.ctx, d.ID, c.Token, o); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			bd.clock.Advance(time.Hour)
			if _, err := bd.r.Pass(bd.ctx); err != nil {
				b.Fatal(err)
			}
			autovacuum(b, bd.db)
			if hour%24 == 0 {
				sizes = append(sizes, tablesSize(b, bd.db))
				b.Logf("day %2d: %6.1f MB", hour/24, float64(sizes[len(sizes)-1])/(1<<20))
				if hour/24%10 == 0 {
					for _, table := range benchTables {
						var heap, all int64
						if err := bd.db.QueryRow(bd.ctx, `SELECT pg_table_size($1::regclass), pg_total_relation_size($1::regclass)`,
							table).Scan(&heap, &all); err != nil {
							b.Fatal(err)
						}
						b.Logf("    %-10s %6.1f MB, %6.1f MB of it indexes", table, float64(all)/(1<<20), float64(all-heap)/(1<<20))
					}
				}
			}
		}
		dbtest.Audit(b, bd.db)
		for _, day := range []int{10, 20, 30} {
			b.ReportMetric(float64(sizes[day-1])/(1<<20), fmt.Sprintf("MB-day-%d", day))
		}
		b.ReportMetric(float64(n.Load()), "messages")
	}
}

// target adds a target and its route from erp.
func target(t testing.TB, bd *bundle, name string) {
	t.Helper()
	if _, err := bd.w.CreateTarget(bd.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := bd.w.CreateRoute(bd.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
		t.Fatal(err)
	}
}

// autovacuum vacuums each table over autovacuum's default threshold.
func autovacuum(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	for _, table := range benchTables {
		var dead, live int64
		if err := db.QueryRow(t.Context(), `SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE relname = $1`,
			table).Scan(&dead, &live); err != nil {
			t.Fatal(err)
		}
		if float64(dead) > 50+0.2*float64(live) {
			if _, err := db.Exec(t.Context(), `VACUUM `+table); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tablesSize is the bytes of the tables retention bounds, indexes and
// TOAST included.
func tablesSize(t testing.TB, db *pgxpool.Pool) int64 {
	t.Helper()
	var size int64
	if err := db.QueryRow(t.Context(), `SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest($1::text[]) t`,
		benchTables).Scan(&size); err != nil {
		t.Fatal(err)
	}
	return size
}

// BenchmarkPassUnderLoad measures what a retention pass costs the hot
// path. On the real clock, with settled_after 1 s, it first settles
// -waybill.backlog messages (two targets each), all due; then offers
// -waybill.rate messages/s for twice -waybill.seconds, each ingested, its
// two deliveries claimed and completed. The time is cut into windows
// (-waybill.window, 2 s) that take turns: in one a retention pass runs beside the load
// (paced as in a server, -waybill.share), removing the backlog and what
// the load settles; in the next none runs. Taking turns, both halves see
// the same disturbance from the rest of the machine, which on a shared
// machine is most of the noise. A command counts in the window it began
// in. It reports the p99 of the ingest and of the claim in each half and
// their ratio; the median, over the windows with a pass, of the ratio of
// their p99 to that of the windows on either side, which the drift of
// other jobs' load disturbs least; the messages removed per second of
// pass; and the CPU other jobs took, as a share of one core. With
// -waybill.burn, a loop that keeps one core busy for that long takes the
// pass's place: what any burst of work costs the load on this machine.
//
//	go test -run '^$' -bench PassUnderLoad -benchtime 1x -count 3 -timeout 60m ./retention/
func BenchmarkPassUnderLoad(b *testing.B) {
	for b.Loop() {
		bd := setupReal(b)
		target(b, bd, "beta")
		// A backlog settled as fast as it goes.
		if _, err := load(bd, *benchBacklog, 0, func() *latencies { return &latencies{} }); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // settled_after 1 s, on the real clock
		bd.retain(b, 0, time.Second, time.Second)

		var (
			current  atomic.Int64 // the window under way
			removed  int
			passTime time.Duration
		)
		window := *benchWindow
		windows := int(2 * time.Duration(*benchSeconds) * time.Second / window)
		lats := make([]*latencies, windows)
		for i := range lats {
			lats[i] = &latencies{}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for w := range windows {
				end := time.Now().Add(window)
				current.Store(int64(w))
				if w%2 == 0 {
					time.Sleep(time.Until(end))
					continue
				}
				ctx, cancel := context.WithDeadline(bd.ctx, end)
				began := time.Now()
				if *benchBurn > 0 {
					for time.Since(began) < *benchBurn {
					}
					cancel()
					time.Sleep(time.Until(end))
					passTime += time.Since(began)
					continue
				}
				res, err := bd.r.Pass(ctx)
				if err != nil && ctx.Err() == nil {
					b.Error(err)
				}
				cancel()
				time.Sleep(time.Until(end))
				passTime += time.Since(began)
				removed += res.Removed()
			}
		}()
		cpu, began := outsideCPU(b, bd.db), time.Now()
		n := int(*benchRate * float64(windows) * window.Seconds())
		_, err := load(bd, n, *benchRate, func() *latencies { return lats[current.Load()] })
		if err != nil {
			b.Fatal(err)
		}
		other := (outsideCPU(b, bd.db) - cpu) / time.Since(began).Seconds()
		<-done
		// Pooled by half, and, against the drift of the machine's load,
		// the median over the windows with a pass of the ratio to the
		// mean of the windows on either side.
		quiet, busy := &latencies{}, &latencies{}
		var ingestRatios, claimRatios []float64
		for w, l := range lats {
			to := quiet
			if w%2 == 1 {
				to = busy
				if w+1 < len(lats) {
					ingestRatios = append(ingestRatios, 2*p99(l.ingest)/(p99(lats[w-1].ingest)+p99(lats[w+1].ingest)))
					claimRatios = append(claimRatios, 2*p99(l.claim)/(p99(lats[w-1].claim)+p99(lats[w+1].claim)))
				}
			}
			to.ingest, to.claim = append(to.ingest, l.ingest...), append(to.claim, l.claim...)
		}
		b.ReportMetric(100*other, "other-cpu-%")
		b.ReportMetric(p99(quiet.ingest), "p99-ingest-ms")
		b.ReportMetric(p99(quiet.claim), "p99-claim-ms")
		b.ReportMetric(p99(busy.ingest), "p99-ingest-pass-ms")
		b.ReportMetric(p99(busy.claim), "p99-claim-pass-ms")
		b.ReportMetric(p99(busy.ingest)/p99(quiet.ingest), "ingest-ratio")
		b.ReportMetric(p99(busy.claim)/p99(quiet.claim), "claim-ratio")
		b.ReportMetric(median(ingestRatios), "ingest-ratio-median")
		b.ReportMetric(median(claimRatios), "claim-ratio-median")
		b.ReportMetric(float64(removed)/passTime.Seconds(), "removed/s")
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// setupReal is setup, its target alpha included, on the real clock.
func setupReal(t testing.TB) *bundle {
	t.Helper()
	bd := setup(t)
	base := service.Base{Now: time.Now, Logger: quiet}
	var err error
	if bd.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: bd.db}); err != nil {
		t.Fatal(err)
	}
	if bd.r, err = retention.New(retention.Config{Base: base, Writer: bd.w, DB: bd.db, Share: *benchShare, Batch: *benchBatch}); err != nil {
		t.Fatal(err)
	}
	return bd
}

// outsideCPU is the machine's busy CPU seconds less this process's and
// its PostgreSQL server's; 0 where /proc cannot tell.
func outsideCPU(t testing.TB, db *pgxpool.Pool) float64 {
	t.Helper()
	var dir string
	if err := db.QueryRow(t.Context(), `SELECT current_setting('data_directory')`).Scan(&dir); err != nil {
		return 0
	}
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	pg, ok := cpustat.ProcessTree(pid)
	host, hostOK := cpustat.HostBusy()
	if !ok || !hostOK {
		return 0
	}
	return host - pg - cpustat.Self()
}

type latencies struct {
	mu            sync.Mutex
	ingest, claim []time.Duration
}

func (l *latencies) add(to *[]time.Duration, d time.Duration) {
	l.mu.Lock()
	*to = append(*to, d)
	l.mu.Unlock()
}

func p99(ds []time.Duration) float64 {
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return float64(ds[int(math.Ceil(0.99*float64(len(ds))))-1]) / float64(time.Millisecond)
}

// load ingests n messages, at rate a second (0: as fast as 64 goroutines
// go), and claims and completes their deliveries, recording the latency of
// each ingest and claim in the latencies lat gives when the command
// begins.
func load(bd *bundle, n int, rate float64, lat func() *latencies) ([]uuid.UUID, error) {
	g := &errgroup.Group{}
	g.SetLimit(64)
	body := make([]byte, 512)
	began := time.Now()
	ids := make([]uuid.UUID, n)
	for i := range n {
		if rate > 0 {
			time.Sleep(time.Until(began.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		}
		g.Go(func() error {
			t, l := time.Now(), lat()
			m, _, err := bd.w.Ingest(bd.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: body})
			if err != nil {
				return err
			}
			l.add(&l.ingest, time.Since(t))
			ids[i] = m.ID
			for _, d := range m.Deliveries {
				t, l := time.Now(), lat()
				c, err := bd.w.Claim(bd.ctx, d.ID, time.Minute)
				if err != nil {
					return err
				}
				l.add(&l.claim, time.Since(t))
				if _, err := bd.w.Complete(bd.ctx, d.ID, c.Token, lifecycle.Delivered("200")); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return ids, g.Wait()
}
