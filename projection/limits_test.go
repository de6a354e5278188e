package projection_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

// limitSpecs are the definitions the limits' tests store: without limits,
// with max_concurrent, with a rate, with both.
func limitSpecs() []lifecycle.Target {
	rate := &lifecycle.Rate{PerSecond: 4, Burst: 3}
	return []lifecycle.Target{{}, {MaxConcurrent: 2}, {Rate: rate}, {MaxConcurrent: 2, Rate: rate}}
}

// TestLimitsAgreeInSQLAndGo holds the limits' SQL, which target_allowance,
// targets_admit and the claims' check before it are built from
// (lifecycle.LimitedSQL, RatedSQL, LimitsAllowanceSQL, RateTokensSQL), to
// lifecycle.Target.Limited, Rate, LimitsAllowance and Rate.Tokens, on the
// definitions as stored: without limits, with max_concurrent, with a
// rate, with both; attempts in flight around the limit; buckets missing,
// empty, filling, full and ahead of the clock.
func TestLimitsAgreeInSQLAndGo(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	buckets := []lifecycle.Bucket{{}, {Tokens: 0, At: now}, {Tokens: 0.5, At: now.Add(-100 * time.Millisecond)},
		{Tokens: 0, At: now.Add(-250 * time.Millisecond)}, {Tokens: 1, At: now.Add(-2 * time.Second)},
		{Tokens: 2, At: now.Add(time.Second)}, {Tokens: -1, At: now.Add(-time.Second)}}
	limitedSQL := `SELECT ` + lifecycle.LimitedSQL("$1::jsonb")
	ratedSQL := `SELECT ` + lifecycle.RatedSQL("$1::jsonb")
	tokensSQL := `SELECT ` + lifecycle.RateTokensSQL("$1::jsonb", "$2::float8", "$3::timestamptz", "$4::timestamptz")
	allowanceSQL := `SELECT ` + lifecycle.LimitsAllowanceSQL("$1::jsonb", "$2::int", "$3::float8", "$4::int")
	for _, spec := range limitSpecs() {
		spec = spec.WithDefaults()
		stored, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var limited bool
		if err := db.QueryRow(ctx, limitedSQL, stored).Scan(&limited); err != nil {
			t.Fatal(err)
		}
		if limited != spec.Limited() {
			t.Errorf("%s: SQL limited %t, Go %t", stored, limited, spec.Limited())
		}
		var rated bool
		if err := db.QueryRow(ctx, ratedSQL, stored).Scan(&rated); err != nil {
			t.Fatal(err)
		}
		if rated != (spec.Rate != nil) {
			t.Errorf("%s: SQL rated %t, Go has rate %v", stored, rated, spec.Rate)
		}
		for _, b := range buckets {
			var at *time.Time
			if !b.At.IsZero() {
				at = &b.At
			}
			var tokens *float64
			if err := db.QueryRow(ctx, tokensSQL, stored, b.Tokens, at, now).Scan(&tokens); err != nil {
				t.Fatal(err)
			}
			var goTokens float64
			if spec.Rate != nil {
				goTokens = spec.Rate.Tokens(b, now)
				if tokens == nil || *tokens != goTokens {
					t.Errorf("%s, bucket %+v: SQL holds %v tokens, Go %g", stored, b, tokens, goTokens)
				}
			} else if tokens != nil {
				t.Errorf("%s: tokens %g without a rate", stored, *tokens)
			}
			for inFlight := range 4 {
				for _, want := range []int{1, 2, 5} {
					var got int
					if err := db.QueryRow(ctx, allowanceSQL, stored, inFlight, tokens, want).Scan(&got); err != nil {
						t.Fatal(err)
					}
					if w := spec.LimitsAllowance(inFlight, goTokens, want); got != w {
						t.Errorf("%s, %d in flight, %g tokens, want %d: SQL allows %d, Go %d", stored, inFlight, goTokens, want, got, w)
					}
				}
			}
		}
	}
}

// TestTargetAllowanceAgreesWithItsBody holds target_allowance, the
// function the sweep calls, and its body as the claims' choice writes it
// into its statement (schema.TargetAllowanceSQL, with parameters), to
// lifecycle.Target.LimitsAllowance, on targets and buckets as stored: the
// body's columns (a bucket's at) must not stand for the function's
// arguments of the same names. For a target without limits, the choice's
// body that leaves them out (schema.UnlimitedAllowanceSQL) agrees too.
func TestTargetAllowanceAgreesWithItsBody(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	ctx := t.Context()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	buckets := []lifecycle.Bucket{{}, {Tokens: 0, At: now.Add(-250 * time.Millisecond)}, {Tokens: 1, At: now.Add(-2 * time.Second)}}
	body := `SELECT ` + schema.TargetAllowanceSQL("$1", "$2::timestamptz", "$3::int", "0")
	unlimited := `SELECT ` + schema.UnlimitedAllowanceSQL("$1", "$2::timestamptz", "$3::int")
	n := 0
	for _, spec := range limitSpecs() {
		for _, bucket := range buckets {
			n++
			spec := spec.WithDefaults()
			spec.Name, spec.Enabled = fmt.Sprint("limited-", n), true
			stored, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(ctx, `INSERT INTO targets (name, spec, created_at, updated_at) VALUES ($1, $2, $3, $3)`, spec.Name, stored, now); err != nil {
				t.Fatal(err)
			}
			if !bucket.At.IsZero() {
				if _, err := db.Exec(ctx, `INSERT INTO target_buckets (target, tokens, at) VALUES ($1, $2, $3)`, spec.Name, bucket.Tokens, bucket.At); err != nil {
					t.Fatal(err)
				}
			}
			var tokens float64
			if spec.Rate != nil {
				tokens = spec.Rate.Tokens(bucket, now)
			}
			for _, want := range []int{1, 2, 5} {
				var fn, inline int
				if err := db.QueryRow(ctx, `SELECT target_allowance($1, $2, $3, 0)`, spec.Name, now, want).Scan(&fn); err != nil {
					t.Fatal(err)
				}
				if err := db.QueryRow(ctx, body, spec.Name, now, want).Scan(&inline); err != nil {
					t.Fatal(err)
				}
				if w := spec.LimitsAllowance(0, tokens, want); fn != w || inline != w {
					t.Errorf("%s, bucket %+v, want %d: target_allowance %d, its body %d, Go %d", stored, bucket, want, fn, inline, w)
				}
				if spec.Limited() {
					continue
				}
				if err := db.QueryRow(ctx, unlimited, spec.Name, now, want).Scan(&inline); err != nil {
					t.Fatal(err)
				}
				if inline != fn {
					t.Errorf("%s, want %d: target_allowance %d, the body without limits %d", stored, want, fn, inline)
				}
			}
		}
	}
}
