package commands_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestLifecycleProperty drives random command sequences against the
// database. After every step the stored status must be DeriveStatus over the
// stored deliveries, and the tables must equal the fold of the journal.
func TestLifecycleProperty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta", "gamma")
	rapid.Check(t, func(rt *rapid.T) {
		var messages []uuid.UUID
		claims := map[uuid.UUID]uuid.UUID{} // delivery -> token of its last claim
		token := func(id uuid.UUID) uuid.UUID {
			if t, ok := claims[id]; ok {
				return t
			}
			return uuid.New() // never claimed here: a stale token
		}
		pickDelivery := func() (uuid.UUID, uuid.UUID, bool) {
			if len(messages) == 0 {
				return uuid.Nil, uuid.Nil, false
			}
			m, err := projection.Load(b.ctx, b.db, rapid.SampledFrom(messages).Draw(rt, "message"))
			if err != nil {
				rt.Fatal(err)
			}
			if len(m.Deliveries) == 0 {
				return m.ID, uuid.Nil, false
			}
			return m.ID, rapid.SampledFrom(m.Deliveries).Draw(rt, "delivery").ID, true
		}
		// expected tolerates the refusals a random sequence runs into.
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
		actions := map[string]func(*rapid.T){
			"ingest": func(rt *rapid.T) {
				in := newMessage()
				in.From = rapid.SampledFrom([]string{"acme", "other"}).Draw(rt, "from")
				in.DuplicateKey = rapid.SampledFrom([]string{"", "ctl-1", "ctl-2"}).Draw(rt, "duplicate key")
				m, _, err := b.w.Ingest(b.ctx, in)
				expected(err)
				messages = append(messages, m.ID)
			},
			// A scheduled message: due in up to two hours, or at once.
			"ingest scheduled": func(rt *rapid.T) {
				in := newMessage()
				delay := lifecycle.Duration(time.Duration(rapid.IntRange(0, 120).Draw(rt, "delay minutes")) * time.Minute)
				in.Delay = &delay
				m, _, err := b.w.Ingest(b.ctx, in)
				expected(err)
				messages = append(messages, m.ID)
			},
			"deliver now": func(rt *rapid.T) {
				if m, _, _ := pickDelivery(); m != uuid.Nil {
					_, err := b.w.DeliverNow(b.ctx, m, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotScheduled)
				}
			},
			// An ingest whose targets' workers have slots free claims for them.
			"ingest to idle workers": func(rt *rapid.T) {
				k := &taker{free: map[string]int{}, lease: time.Duration(rapid.IntRange(1, 10).Draw(rt, "lease")) * time.Minute}
				for _, target := range []string{"alpha", "beta", "gamma"} {
					k.free[target] = rapid.IntRange(0, 1).Draw(rt, "free "+target)
				}
				b.w.SetTaker(k)
				defer b.w.DropTaker(k)
				m, _, err := b.w.Ingest(b.ctx, newMessage())
				expected(err)
				messages = append(messages, m.ID)
				ran, _ := k.take()
				for _, c := range ran {
					claims[c.Delivery.ID] = c.Token
				}
			},
			"claim": func(rt *rapid.T) {
				if _, id, ok := pickDelivery(); ok {
					c, err := b.w.Claim(b.ctx, id, time.Duration(rapid.IntRange(1, 10).Draw(rt, "lease"))*time.Minute)
					expected(err, commands.ErrNotClaimable)
					if err == nil {
						claims[id] = c.Token
					}
				}
			},
			"complete": func(rt *rapid.T) {
				_, id, ok := pickDelivery()
				if !ok {
					return
				}
				// Times with nanoseconds and texts the database cannot
				// hold as they are, as a real clock and a real target give
				// them: what is journaled must still equal what is stored.
				at := b.clock.Now().Add(time.Duration(rapid.IntRange(1, 999).Draw(rt, "ns")))
				outcome := rapid.SampledFrom([]lifecycle.Outcome{
					lifecycle.Delivered("200"),
					lifecycle.AwaitingAck("sent", at.Add(time.Hour)),
					lifecycle.Retry(at.Add(5*time.Minute), "503 \xff\x00"),
					lifecycle.Failed("400"),
				}).Draw(rt, "outcome")
				_, err := b.w.Complete(b.ctx, id, token(id), outcome)
				expected(err, commands.ErrClaimLost)
			},
			"release": func(rt *rapid.T) {
				if _, id, ok := pickDelivery(); ok {
					_, err := b.w.Release(b.ctx, id, token(id), rapid.Bool().Draw(rt, "started"), "stopping")
					expected(err, commands.ErrClaimLost)
				}
			},
			"receipt": func(rt *rapid.T) {
				if _, id, ok := pickDelivery(); ok {
					_, err := b.w.Receipt(b.ctx, id, rapid.Bool().Draw(rt, "positive"), "", "source:partner")
					expected(err, commands.ErrReceiptRefused)
				}
			},
			"redeliver": func(rt *rapid.T) {
				if m, id, ok := pickDelivery(); ok {
					_, err := b.w.Redeliver(b.ctx, m, id, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotRedeliverable)
				}
			},
			"redispatch": func(rt *rapid.T) {
				if m, _, _ := pickDelivery(); m != uuid.Nil {
					_, err := b.w.Redispatch(b.ctx, m, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotRedispatchable)
				}
			},
			"skip": func(rt *rapid.T) {
				if m, id, ok := pickDelivery(); ok {
					_, err := b.w.Skip(b.ctx, m, id, commands.Action{Operator: "admin", Reason: "by hand"})
					expected(err, commands.ErrNotSkippable)
				}
			},
			"resend": func(rt *rapid.T) {
				if m, _, _ := pickDelivery(); m != uuid.Nil {
					targets := rapid.SampledFrom([][]string{nil, {"alpha"}, {"beta", "gamma"}}).Draw(rt, "targets")
					_, err := b.w.Resend(b.ctx, m, targets, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotResendable, commands.ErrInvalid)
				}
			},
			"replay": func(rt *rapid.T) {
				if m, _, _ := pickDelivery(); m != uuid.Nil {
					_, err := b.w.Replay(b.ctx, m, commands.Action{Operator: "admin"})
					expected(err, commands.ErrNotResendable)
				}
			},
			"stale action": func(rt *rapid.T) {
				m, id, ok := pickDelivery()
				if !ok {
					return
				}
				before, err := projection.Load(b.ctx, b.db, m)
				if err != nil {
					rt.Fatal(err)
				}
				if before.Version == 1 {
					return
				}
				a := commands.Action{Operator: "admin", IfVersion: before.Version - rapid.IntRange(1, before.Version-1).Draw(rt, "behind")}
				if _, err := b.w.Skip(b.ctx, m, id, a); !errors.Is(err, commands.ErrStale) {
					rt.Fatalf("a skip at version %d of a message at %d: %v", a.IfVersion, before.Version, err)
				}
			},
			"sweep": func(rt *rapid.T) {
				if _, id, ok := pickDelivery(); ok {
					_, err := b.w.ExpireLease(b.ctx, id)
					expected(err)
					_, err = b.w.Wake(b.ctx, id)
					expected(err)
					_, err = b.w.TimeoutReceipt(b.ctx, id)
					expected(err)
					_, err = b.w.ComeDue(b.ctx, id)
					expected(err)
				}
			},
			"time passes": func(rt *rapid.T) {
				b.clock.Advance(time.Duration(rapid.IntRange(1, 90).Draw(rt, "minutes"))*time.Minute +
					time.Duration(rapid.IntRange(0, 999_999_999).Draw(rt, "ns")))
			},
		}
		for range rapid.IntRange(1, 25).Draw(rt, "steps") {
			name := rapid.SampledFrom([]string{"ingest", "ingest scheduled", "deliver now", "claim", "complete", "release", "receipt",
				"redeliver", "redispatch", "skip", "resend", "replay", "stale action", "sweep", "time passes"}).Draw(rt, "action")
			actions[name](rt)
			for _, id := range messages {
				m, err := projection.Load(b.ctx, b.db, id)
				if err != nil {
					rt.Fatal(err)
				}
				var states []lifecycle.DeliveryState
				for _, d := range m.Deliveries {
					if m.Current(&d) {
						states = append(states, d.State)
					}
					// The count of due deliveries relies on this (WaitRule).
					if (lifecycle.WakeRule.Admits(d.State) || d.State == lifecycle.StateScheduled) && (d.NextDue.IsZero() || !m.Current(&d)) {
						rt.Fatalf("after %s: delivery %s is %s with next_due %v in generation %d of %d",
							name, d.ID, d.State, d.NextDue, d.Generation, m.Generation)
					}
				}
				// What the Writer holds of a message at its version is the
				// message: a batch's read leaves it out and uses that.
				if h := b.w.Written(id); h != nil && h.Version == m.Version {
					for _, v := range projection.Compare(m, h) {
						rt.Fatalf("after %s: the Writer holds message %s otherwise: %s", name, id, v)
					}
				}
				if want := lifecycle.DeriveStatus(m.Stage, m.Refusal, states); m.Status != want {
					rt.Fatalf("after %s: message %s stored %s, derived %s", name, id, m.Status, want)
				}
				r, err := projection.Audit(b.ctx, b.db, id)
				if err != nil {
					rt.Fatal(err)
				}
				for _, v := range r.Violations {
					rt.Fatalf("after %s: %s", name, v)
				}
			}
		}
		// The whole journal's audit checks what spans messages: each
		// possible duplicate names an earlier message of its key.
		r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
		if err != nil {
			rt.Fatal(err)
		}
		for _, v := range r.Violations {
			rt.Fatalf("whole journal: %s", v)
		}
	})
}
