package projection_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestRulesAgreeInSQLAndFold holds the lifecycle's rules to the two places
// that use them: for every delivery state and every combination of due
// time, wake-ups and lease, the rule's SQL (run in PostgreSQL), its Holds,
// and the fold's acceptance of the events the rule governs all agree.
func TestRulesAgreeInSQLAndFold(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	times := []time.Time{{}, now.Add(-lifecycle.WakeGrace), now.Add(-time.Second), now, now.Add(time.Second)}
	var cases []projection.Delivery
	for _, state := range lifecycle.DeliveryStates {
		for _, due := range times {
			for _, lease := range times {
				for _, woken := range []int{0, 1} {
					cases = append(cases, projection.Delivery{ID: uuid.New(), Target: "alpha", State: state,
						NextDue: due, LeaseEnd: lease, DispatchCount: woken, Attempts: 1, ClaimToken: uuid.New()})
				}
			}
		}
	}

	// The events each rule governs in the fold, made legal in every other
	// respect, so only the rule decides.
	governed := map[string][]func(d projection.Delivery) journal.Payload{
		lifecycle.ClaimRule.Name: {func(d projection.Delivery) journal.Payload {
			return &journal.DeliveryClaimed{Token: uuid.New(), Attempt: d.Attempts + 1, LeaseEnd: now.Add(time.Minute)}
		}},
		lifecycle.LeaseExpiryRule.Name: {func(d projection.Delivery) journal.Payload {
			return &journal.DeliveryLeaseExpired{Token: d.ClaimToken, LeaseEnd: d.LeaseEnd}
		}},
		lifecycle.WakeRule.Name: {
			func(d projection.Delivery) journal.Payload {
				return &journal.DeliveryWoken{DispatchCount: d.DispatchCount + 1, NextDue: now.Add(time.Minute)}
			},
			func(d projection.Delivery) journal.Payload {
				return &journal.DeliveryStalled{WakeUps: d.DispatchCount, Reason: "no worker"}
			},
		},
		lifecycle.ReceiptTimeoutRule.Name: {func(d projection.Delivery) journal.Payload {
			return &journal.ReceiptTimedOut{Deadline: d.NextDue, Reason: "late"}
		}},
		lifecycle.DueRule.Name: {func(projection.Delivery) journal.Payload {
			return &journal.DeliveryDue{DispatchCount: 1, NextDue: now.Add(time.Minute)}
		}},
		lifecycle.RedeliverRule.Name: {func(projection.Delivery) journal.Payload {
			return &journal.DeliveryRedelivered{DispatchCount: 1, NextDue: now.Add(time.Minute)}
		}},
	}

	for _, rule := range lifecycle.Rules {
		t.Run(rule.Name, func(t *testing.T) {
			inSQL := selectByRule(t, db, rule, cases, now)
			for _, d := range cases {
				holds := rule.Holds(d.Facts(), now)
				if inSQL[d.ID] != holds {
					t.Errorf("%s: SQL says %v, Holds says %v", describe(d), inSQL[d.ID], holds)
				}
				for _, payload := range governed[rule.Name] {
					p := payload(d)
					if p.Kind() == journal.KindDeliveryStalled && d.DispatchCount == 0 {
						continue // a stall needs a wake-up before it
					}
					m := &projection.Message{ID: uuid.New(), Version: 3, Stage: lifecycle.StageDispatched,
						Deliveries: []projection.Delivery{d}}
					_, err := projection.Record(m, journal.Event{RecordedAt: now, DeliveryID: d.ID, Actor: "sweep", Payload: p})
					if (err == nil) != holds {
						t.Errorf("%s: the fold %s %s (%v), Holds says %v", describe(d),
							map[bool]string{true: "accepts", false: "refuses"}[err == nil], p.Kind(), err, holds)
					}
				}
			}
			if rule.Name == lifecycle.CatchUpRule.Name {
				for _, d := range cases {
					either := lifecycle.ClaimRule.Holds(d.Facts(), now) || lifecycle.LeaseExpiryRule.Holds(d.Facts(), now)
					if rule.Holds(d.Facts(), now) != either {
						t.Errorf("%s: catch-up is not claim or lease expiry", describe(d))
					}
				}
			}
		})
	}
}

// selectByRule runs the rule's SQL over the deliveries as rows and returns
// the ids it selects.
func selectByRule(t *testing.T, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, rule lifecycle.Rule, cases []projection.Delivery, now time.Time) map[uuid.UUID]bool {
	t.Helper()
	var (
		ids          []uuid.UUID
		states       []string
		dues, leases []pgtype.Timestamptz
		woken        []int32
	)
	for _, d := range cases {
		ids, states, woken = append(ids, d.ID), append(states, string(d.State)), append(woken, int32(d.DispatchCount))
		dues = append(dues, pgtype.Timestamptz{Time: d.NextDue, Valid: !d.NextDue.IsZero()})
		leases = append(leases, pgtype.Timestamptz{Time: d.LeaseEnd, Valid: !d.LeaseEnd.IsZero()})
	}
	rows, err := db.Query(t.Context(), `SELECT d.id FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::int[], $5::timestamptz[])
		AS d(id, state, next_due, dispatch_count, lease_end) WHERE $6::timestamptz IS NOT NULL AND `+rule.SQL("d", "$6"), ids, states, dues, woken, leases, now)
	if err != nil {
		t.Fatalf("%s: %v", rule.Name, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]bool{}
	for _, id := range got {
		out[id] = true
	}
	return out
}

func describe(d projection.Delivery) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format("15:04:05")
	}
	return fmt.Sprintf("%s due %s lease %s woken %d", d.State, at(d.NextDue), at(d.LeaseEnd), d.DispatchCount)
}
