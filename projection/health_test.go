package projection_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestGateAgreesInSQLAndGo holds the gate's SQL (target_allowance, built
// from lifecycle.GateAllowanceSQL) to lifecycle.Gate.Allowance, for every
// breaker state, hold and probe around now, and a target without a row.
func TestGateAgreesInSQLAndGo(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	times := []time.Time{{}, now.Add(-time.Second), now, now.Add(time.Second)}
	var gates []lifecycle.Gate
	for _, state := range []lifecycle.HealthState{lifecycle.HealthClosed, lifecycle.HealthOpen, lifecycle.HealthHalfOpen} {
		for _, throttled := range times {
			for _, probe := range times {
				gates = append(gates, lifecycle.Gate{Breaker: state, ThrottledUntil: throttled, ProbeUntil: probe})
			}
		}
	}
	b := &pgx.Batch{}
	for i, g := range gates {
		h := projection.TargetHealth{Target: targetName(i), Breaker: g.Breaker, ThrottledUntil: g.ThrottledUntil, ProbeUntil: g.ProbeUntil}
		b.Queue(`INSERT INTO target_health (target) VALUES ($1)`, h.Target)
		projection.QueueWriteHealth(b, h)
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	for i, g := range gates {
		for _, want := range []int{1, 5} {
			var got int
			if err := db.QueryRow(ctx, `SELECT target_allowance($1, $2, $3, 0)`, targetName(i), now, want).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if w := g.Allowance(now, want); got != w {
				t.Errorf("gate %+v, want %d: SQL allows %d, Go %d", g, want, got, w)
			}
		}
	}
	var got int
	if err := db.QueryRow(ctx, `SELECT target_allowance('none', $1, 7, 0)`, now).Scan(&got); err != nil || got != 7 {
		t.Errorf("a target without a row: %d, %v", got, err)
	}
}

func targetName(i int) string { return "t" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }
