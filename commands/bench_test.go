package commands_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

func BenchmarkIngestTwoTargets(b *testing.B) {
	bd := setup(b)
	bd.targets(b, "alpha", "beta")
	for b.Loop() {
		if _, _, err := bd.w.Ingest(bd.ctx, newMessage()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	bd := setup(b)
	bd.targets(b, "alpha")
	for b.Loop() {
		b.StopTimer()
		m, _, err := bd.w.Ingest(bd.ctx, newMessage())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d := m.Deliveries[0]
		c, err := bd.w.Claim(bd.ctx, d.ID, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bd.w.Complete(bd.ctx, d.ID, c.Token, lifecycle.Delivered("200")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimBesideABlockedLane measures the claim of a fifo target's
// lane heads with, and without, a lane of 100,000 deliveries blocked
// behind a failed head on the same target: the blocked ones are in no
// index the claim reads, so they should cost it nothing. Each iteration
// ingests a message of a fresh key (untimed), then claims it with
// ClaimDue and records its outcome.
func BenchmarkClaimBesideABlockedLane(b *testing.B) {
	for _, blocked := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("blocked=%d", blocked), func(b *testing.B) {
			bd := setup(b)
			bd.fifoTarget(b, "hl7", lifecycle.OnFailureBlock)
			if blocked > 0 {
				blockLane(b, bd, "stuck", blocked)
			}
			i := 0
			for b.Loop() {
				b.StopTimer()
				in := newMessage()
				in.OrderingKey = fmt.Sprintf("key-%d", i)
				i++
				if _, _, err := bd.w.Ingest(bd.ctx, in); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				claims, err := bd.w.ClaimDue(bd.ctx, "hl7", 1, time.Minute)
				if err != nil || len(claims) != 1 || claims[0].Message.OrderingKey == "stuck" {
					b.Fatalf("claimed %d: %v", len(claims), err)
				}
				if _, err := bd.w.Complete(bd.ctx, claims[0].Delivery.ID, claims[0].Token, lifecycle.Delivered("200")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// blockLane makes the lane of key on bd's target hl7 a failed head with n
// deliveries blocked behind it, ingested from 16 goroutines.
func blockLane(b *testing.B, bd *bundle, key string, n int) {
	in := newMessage()
	in.OrderingKey = key
	head, _, err := bd.w.Ingest(bd.ctx, in)
	if err != nil {
		b.Fatal(err)
	}
	c, err := bd.w.Claim(bd.ctx, head.Deliveries[0].ID, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bd.w.Complete(bd.ctx, head.Deliveries[0].ID, c.Token, lifecycle.Failed("400")); err != nil {
		b.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, _, err := bd.w.Ingest(bd.ctx, in); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, err := bd.db.Exec(bd.ctx, `ANALYZE deliveries`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkIngestListIndexes measures what the four indexes of the
// messages list's filters (type, from, to, idempotency key) cost an ingest
// of a message that has all four, against the same ingest with them
// dropped: in time, and in WAL written (WAL-bytes/op), which other jobs on
// the machine do not blur.
func BenchmarkIngestListIndexes(b *testing.B) {
	for _, indexes := range []string{"with", "without"} {
		b.Run("indexes="+indexes, func(b *testing.B) {
			bd := setup(b)
			bd.targets(b, "alpha", "beta")
			if indexes == "without" {
				if _, err := bd.db.Exec(bd.ctx, `DROP INDEX messages_type_created, messages_from_created,
					messages_to_created, messages_idempotency_key_created`); err != nil {
					b.Fatal(err)
				}
			}
			var start string
			if err := bd.db.QueryRow(bd.ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&start); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				in := newMessage()
				in.Type, in.IdempotencyKey = "invoice.created", fmt.Sprintf("key-%d", i)
				i++
				if _, _, err := bd.w.Ingest(bd.ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			var wal float64
			if err := bd.db.QueryRow(bd.ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, start).Scan(&wal); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(wal/float64(i), "WAL-bytes/op")
		})
	}
}
