package workers_test

import (
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// BenchmarkRetryLateness measures how late retries are claimed: 1,000
// messages to an http target on a loopback sink that answers each
// message's first request 503, retried by a fixed policy of 5 s with full
// jitter, so the retries come due over the 10 s after each first attempt.
// A retry's lateness is its second claim's recorded_at less the retry_at
// of the first attempt's outcome, both read from the journal. The sweep
// runs beside the Runtime as in a server, every 5 s; the run reports the
// deliveries it woke, and how busy the machine's cores were (this process,
// PostgreSQL and everything else), which says how far other jobs disturbed
// it.
//
//	go test -run '^$' -bench RetryLateness -benchtime 1x -count 3 ./workers/
func BenchmarkRetryLateness(b *testing.B) {
	const messages = 1000
	env := setup(b)
	spec := env.httpTarget("web")
	spec.MaxConcurrent = 40
	spec.Retry = lifecycle.RetryPolicy{Strategy: lifecycle.RetryFixed, BaseDelay: lifecycle.Duration(5 * time.Second),
		Jitter: new(1.0)}
	env.target(b, spec)
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	env.sink.setAnswer(func(_ int, _ http.ResponseWriter, r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if !seen[key] {
			seen[key] = true
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	p := env.process(b)
	p.runtime(b, env)
	p.sweep(b, env, 5*time.Second)

	var late []time.Duration
	busy, _ := cpustat.HostBusy()
	began := time.Now()
	for b.Loop() {
		var ms []*projection.Message
		for i := range messages {
			m, _, err := p.w.Ingest(env.ctx, newMessage(i))
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var open int
			if err := env.db.QueryRow(env.ctx, `SELECT count(*) FROM messages WHERE status <> 'delivered'`).Scan(&open); err != nil {
				b.Fatal(err)
			}
			if open == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d messages not delivered after a minute", open)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rows, err := env.db.Query(env.ctx, `SELECT (extract(epoch FROM c.recorded_at - (a.payload->'outcome'->>'retry_at')::timestamptz) * 1e6)::bigint
			FROM journal a JOIN journal c ON c.delivery_id = a.delivery_id AND c.kind = $1 AND (c.payload->>'attempt')::int = 2
			WHERE a.kind = $2 AND a.payload->'outcome'->>'kind' = 'retry' AND a.stream = ANY($3)`,
			journal.KindDeliveryClaimed, journal.KindDeliveryAttempted, streams(ms))
		if err != nil {
			b.Fatal(err)
		}
		micros, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			b.Fatal(err)
		}
		if len(micros) != messages {
			b.Fatalf("%d retries claimed, want %d", len(micros), messages)
		}
		for _, us := range micros {
			late = append(late, time.Duration(us)*time.Microsecond)
		}
	}
	var woken int
	if err := env.db.QueryRow(env.ctx, `SELECT count(*) FROM journal WHERE kind = $1`, journal.KindDeliveryWoken).Scan(&woken); err != nil {
		b.Fatal(err)
	}
	if now, ok := cpustat.HostBusy(); ok {
		b.ReportMetric(100*(now-busy)/time.Since(began).Seconds()/float64(runtime.NumCPU()), "host-busy-%")
	}
	slices.Sort(late)
	b.ReportMetric(float64(percentile(late, 50).Microseconds())/1000, "p50-late-ms")
	b.ReportMetric(float64(percentile(late, 99).Microseconds())/1000, "p99-late-ms")
	b.ReportMetric(float64(late[len(late)-1].Microseconds())/1000, "max-late-ms")
	b.ReportMetric(float64(woken), "woken")
	b.ReportMetric(0, "ns/op")
}

func streams(ms []*projection.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = journal.MessageStream(m.ID)
	}
	return out
}
