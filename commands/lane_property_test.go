package commands_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestLaneProperty drives random sequences over a few keys of two fifo
// targets (one blocking, one continuing on failure) and a plain one, from
// two Writers as two processes would: ingests, claims by wake-up and by
// catch-up, every outcome, releases, receipts, skips, redeliveries, lease
// expiries and time passing. After every step no lane has two deliveries
// out of the blocked state and unsettled for it, and the tables hold what
// the journal folds to; the whole journal, lanes included, is audited at
// the end of every sequence and now and then between.
func TestLaneProperty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, err := newWriter(b, b.wake)
	if err != nil {
		t.Fatal(err)
	}
	writers := []*commands.Writer{b.w, other}
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		// Each sequence has targets and a source of its own, so what one
		// left behind does not mix into the next and a failure shrinks.
		run++
		source := fmt.Sprintf("s%d", run)
		names := map[string]string{"strict": fmt.Sprintf("strict-%d", run), "lenient": fmt.Sprintf("lenient-%d", run),
			"plain": fmt.Sprintf("plain-%d", run)}
		for kind, name := range names {
			spec := lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: sinkConfig}
			switch kind {
			case "strict":
				spec.Ordering = lifecycle.Ordering{Mode: lifecycle.OrderingFIFO, OnFailure: lifecycle.OnFailureBlock}
			case "lenient":
				spec.Ordering = lifecycle.Ordering{Mode: lifecycle.OrderingFIFO, OnFailure: lifecycle.OnFailureContinue}
			}
			if _, err := b.w.CreateTarget(b.ctx, spec, admin); err != nil {
				rt.Fatal(err)
			}
			if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: source, From: "*", To: "*", Target: name}, admin); err != nil {
				rt.Fatal(err)
			}
		}
		// Both Writers see the new targets at once.
		other.Invalidate()
		keys := []string{"", "a", "b"}
		var messages []uuid.UUID
		claims := map[uuid.UUID]uuid.UUID{} // delivery -> token of its last claim
		writer := func() *commands.Writer { return writers[rapid.IntRange(0, len(writers)-1).Draw(rt, "writer")] }
		expected := func(err error, allowed ...error) {
			if err == nil {
				return
			}
			for _, a := range allowed {
				if errors.Is(err, a) {
					return
				}
			}
			rt.Fatalf("unexpected error: %v", err)
		}
		pick := func() (projection.Delivery, bool) {
			if len(messages) == 0 {
				return projection.Delivery{}, false
			}
			m, err := projection.Load(b.ctx, b.db, rapid.SampledFrom(messages).Draw(rt, "message"))
			if err != nil {
				rt.Fatal(err)
			}
			return rapid.SampledFrom(m.Deliveries).Draw(rt, "delivery"), true
		}
		token := func(id uuid.UUID) uuid.UUID {
			if tok, ok := claims[id]; ok {
				return tok
			}
			return uuid.New()
		}
		actions := map[string]func(){
			"ingest": func() {
				in := newMessage()
				in.Source = source
				in.OrderingKey = rapid.SampledFrom(keys).Draw(rt, "key")
				w := writer()
				// Some ingests find their targets' workers with a slot free.
				k := &taker{free: map[string]int{}, lease: time.Minute}
				for _, name := range names {
					k.free[name] = rapid.IntRange(0, 1).Draw(rt, "free "+name)
				}
				w.SetTaker(k)
				m, _, err := w.Ingest(b.ctx, in)
				w.DropTaker(k)
				expected(err)
				messages = append(messages, m.ID)
				ran, _ := k.take()
				for _, c := range ran {
					claims[c.Delivery.ID] = c.Token
				}
			},
			"claim": func() {
				if d, ok := pick(); ok {
					c, err := writer().Claim(b.ctx, d.ID, time.Duration(rapid.IntRange(1, 10).Draw(rt, "lease"))*time.Minute)
					expected(err, commands.ErrNotClaimable)
					if err == nil {
						claims[d.ID] = c.Token
					}
				}
			},
			"claim due": func() {
				target := names[rapid.SampledFrom([]string{"strict", "lenient", "plain"}).Draw(rt, "target")]
				cs, err := writer().ClaimDue(b.ctx, target, rapid.IntRange(1, 5).Draw(rt, "n"), time.Minute)
				expected(err)
				for _, c := range cs {
					claims[c.Delivery.ID] = c.Token
				}
			},
			"complete": func() {
				d, ok := pick()
				if !ok {
					return
				}
				at := b.clock.Now()
				outcome := rapid.SampledFrom([]lifecycle.Outcome{
					lifecycle.Delivered("200"),
					lifecycle.AwaitingAck("sent", at.Add(time.Hour)),
					lifecycle.Retry(at.Add(5*time.Minute), "503"),
					lifecycle.Failed("400"),
				}).Draw(rt, "outcome")
				if !rapid.Bool().Draw(rt, "claim next") {
					_, err := writer().Complete(b.ctx, d.ID, token(d.ID), outcome)
					expected(err, commands.ErrClaimLost)
					return
				}
				// As a worker does: the delivery the outcome frees in its
				// lane is claimed in the same transaction.
				_, next, err := writer().CompleteAndClaimNext(b.ctx, d.ID, token(d.ID), outcome, time.Minute, false)
				expected(err, commands.ErrClaimLost)
				if next != nil {
					claims[next.Delivery.ID] = next.Token
				}
			},
			"release": func() {
				if d, ok := pick(); ok {
					_, err := writer().Release(b.ctx, d.ID, token(d.ID), rapid.Bool().Draw(rt, "started"), "stopping")
					expected(err, commands.ErrClaimLost)
				}
			},
			"receipt": func() {
				if d, ok := pick(); ok {
					_, err := writer().Receipt(b.ctx, d.ID, rapid.Bool().Draw(rt, "positive"), "", "source:partner")
					expected(err, commands.ErrReceiptRefused)
				}
			},
			"skip": func() {
				if d, ok := pick(); ok {
					_, err := writer().Skip(b.ctx, d.MessageID, d.ID, commands.Action{Operator: "admin", Reason: "by hand"})
					expected(err, commands.ErrNotSkippable)
				}
			},
			"redeliver": func() {
				if d, ok := pick(); ok {
					_, err := writer().Redeliver(b.ctx, d.MessageID, d.ID, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotRedeliverable)
				}
			},
			"resend": func() {
				if d, ok := pick(); ok {
					_, err := writer().Resend(b.ctx, d.MessageID, nil, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotResendable)
				}
			},
			"replay": func() {
				if d, ok := pick(); ok {
					_, err := writer().Replay(b.ctx, d.MessageID, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotResendable)
				}
			},
			"sweep": func() {
				if d, ok := pick(); ok {
					w := writer()
					_, err := w.ExpireLease(b.ctx, d.ID)
					expected(err)
					_, err = w.Wake(b.ctx, d.ID)
					expected(err)
					_, err = w.TimeoutReceipt(b.ctx, d.ID)
					expected(err)
				}
			},
			"time passes": func() {
				b.clock.Advance(time.Duration(rapid.IntRange(1, 90).Draw(rt, "minutes")) * time.Minute)
			},
		}
		steps := []string{"ingest", "ingest", "claim", "claim due", "complete", "complete", "release", "receipt",
			"skip", "redeliver", "resend", "replay", "sweep", "time passes"}
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			name := rapid.SampledFrom(steps).Draw(rt, "action")
			actions[name]()
			if crowded := crowdedLanes(b, rt); crowded != "" {
				rt.Fatalf("after %s: %s", name, crowded)
			}
			if rapid.IntRange(0, 4).Draw(rt, "audit now") == 0 {
				auditAll(b, rt, name)
			}
		}
		auditAll(b, rt, "the last step")
	})
}

// crowdedLanes names a lane with more than one delivery neither blocked
// nor settled for the lane, or returns "".
func crowdedLanes(b *bundle, rt *rapid.T) string {
	rows, err := b.db.Query(b.ctx, `SELECT target, lane_key, count(*) FROM deliveries
		WHERE lane_key IS NOT NULL AND NOT (state IN ('blocked', 'delivered', 'skipped', 'superseded')
			OR state = 'failed' AND lane_continue)
		GROUP BY target, lane_key HAVING count(*) > 1`)
	if err != nil {
		rt.Fatal(err)
	}
	var (
		target, key string
		n           int
		out         string
	)
	_, err = pgx.ForEachRow(rows, []any{&target, &key, &n}, func() error {
		out += fmt.Sprintf("lane %s/%q has %d deliveries out of the blocked state; ", target, key, n)
		return nil
	})
	if err != nil {
		rt.Fatal(err)
	}
	return out
}

func auditAll(b *bundle, rt *rapid.T, after string) {
	r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if err != nil {
		rt.Fatal(err)
	}
	if len(r.Violations) > 0 {
		var all []string
		for _, v := range r.Violations {
			all = append(all, v.String())
		}
		rt.Fatalf("after %s:\n%s", after, strings.Join(all, "\n"))
	}
}
