package commands_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// settle claims the delivery and completes it with the outcome.
func (b *bundle) settle(t *testing.T, d projection.Delivery, o lifecycle.Outcome) *projection.Message {
	t.Helper()
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatalf("claim %s: %v", d.Target, err)
	}
	m, err := b.w.Complete(b.ctx, d.ID, claim.Token, o)
	if err != nil {
		t.Fatalf("complete %s: %v", d.Target, err)
	}
	return m
}

// journalLen is how many events the journal holds.
func (b *bundle) journalLen(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM journal`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func byTarget(m *projection.Message, generation int) map[string]lifecycle.DeliveryState {
	got := map[string]lifecycle.DeliveryState{}
	for _, d := range m.Deliveries {
		if d.Generation == generation {
			got[d.Target] = d.State
		}
	}
	return got
}

// TestResend: a resend is refused while a delivery of the generation is in
// hand, then makes generation 2 of the current targets (or the named
// ones), superseding what failed and leaving what was delivered.
func TestResend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta", "gamma")
	m := b.ingest(t)
	op := commands.Action{Operator: "alice", Reason: "partner fixed their side"}

	_, err := b.w.Resend(b.ctx, m.ID, nil, op)
	var se *commands.StateError
	if !errors.Is(err, commands.ErrNotResendable) || !errors.As(err, &se) || se.State != "queued" || se.Reason == "" {
		t.Fatalf("resend while queued: %v", err)
	}
	b.settle(t, m.Deliveries[0], lifecycle.Delivered("200"))
	b.settle(t, m.Deliveries[1], lifecycle.Failed("404"))
	m = b.settle(t, m.Deliveries[2], lifecycle.Failed("410"))
	if m.Status != lifecycle.StatusError {
		t.Fatalf("before resend: %s", m.Status)
	}

	before := b.journalLen(t)
	if _, err := b.w.Resend(b.ctx, m.ID, []string{"beta", "delta"}, op); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("resend to a target not of the message: %v", err)
	}
	if _, err := b.w.Resend(b.ctx, m.ID, nil, commands.Action{}); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("resend without an operator: %v", err)
	}
	if got := b.journalLen(t); got != before {
		t.Fatalf("refused resends wrote %d events", got-before)
	}

	m, err = b.w.Resend(b.ctx, m.ID, []string{"beta"}, op)
	if err != nil {
		t.Fatal(err)
	}
	if m.Generation != 2 || m.Status != lifecycle.StatusInProgress || m.Error != "" {
		t.Fatalf("after resend: generation %d status %s error %q", m.Generation, m.Status, m.Error)
	}
	if got, want := byTarget(m, 1), map[string]lifecycle.DeliveryState{
		"alpha": lifecycle.StateDelivered, "beta": lifecycle.StateSuperseded, "gamma": lifecycle.StateSuperseded,
	}; !maps.Equal(got, want) {
		t.Errorf("generation 1: %v, want %v", got, want)
	}
	if got, want := byTarget(m, 2), map[string]lifecycle.DeliveryState{"beta": lifecycle.StateQueued}; !maps.Equal(got, want) {
		t.Errorf("generation 2: %v, want %v", got, want)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	p, ok := last.Payload.(*journal.MessageResent)
	if !ok || last.Actor != "operator:alice" || p.Generation != 2 || p.Replay || p.Reason != op.Reason || len(p.Superseded) != 2 {
		t.Fatalf("journaled %s by %s: %+v", last.Kind(), last.Actor, last.Payload)
	}

	// An earlier generation's deliveries no longer move.
	for _, d := range m.Deliveries {
		if d.Generation == 1 && d.Target == "alpha" {
			var se *commands.StateError
			if _, err := b.w.Redeliver(b.ctx, m.ID, d.ID, op); !errors.Is(err, commands.ErrNotRedeliverable) || !errors.As(err, &se) ||
				!strings.Contains(se.Reason, "generation 1") {
				t.Errorf("redeliver of generation 1's delivered delivery: %v", err)
			}
		}
	}
	// Generation 2 delivered: the message is delivered, though generation
	// 1 had a failure.
	m = b.settle(t, m.Deliveries[len(m.Deliveries)-1], lifecycle.Delivered("200"))
	if m.Status != lifecycle.StatusDelivered {
		t.Errorf("generation 2 delivered: %s", m.Status)
	}
	// Sent again with no targets named: all of generation 2's.
	m, err = b.w.Resend(b.ctx, m.ID, nil, op)
	if err != nil || m.Generation != 3 || len(byTarget(m, 3)) != 1 || byTarget(m, 2)["beta"] != lifecycle.StateDelivered {
		t.Fatalf("resend of a delivered message: %+v %v", m, err)
	}
	b.audit(t)
}

// TestReplay: a replay decides the targets afresh from the routes of now.
func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	m := b.ingest(t)
	m = b.settle(t, m.Deliveries[0], lifecycle.Failed("404"))
	b.targets(t, "beta")
	m, err := b.w.Replay(b.ctx, m.ID, commands.Action{Operator: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := byTarget(m, 2), map[string]lifecycle.DeliveryState{
		"alpha": lifecycle.StateQueued, "beta": lifecycle.StateQueued,
	}; m.Generation != 2 || !maps.Equal(got, want) {
		t.Fatalf("replay: generation %d %v", m.Generation, got)
	}
	for _, d := range m.Deliveries {
		if d.Generation == 2 {
			m = b.settle(t, d, lifecycle.Failed("500"))
		}
	}
	// No route matches any more: the new generation is not routed.
	routes, err := b.w.Routes(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if err := b.w.DeleteRoute(b.ctx, r.ID, admin); err != nil {
			t.Fatal(err)
		}
	}
	m, err = b.w.Replay(b.ctx, m.ID, commands.Action{Operator: "alice"})
	if err != nil || m.Generation != 3 || m.Status != lifecycle.StatusNotRouted || len(byTarget(m, 3)) != 0 {
		t.Fatalf("replay with no route: %+v %v", m, err)
	}
	if got := byTarget(m, 2); got["alpha"] != lifecycle.StateSuperseded || got["beta"] != lifecycle.StateSuperseded {
		t.Errorf("generation 2 after the replay: %v", got)
	}
	// An empty generation has nothing to send again: only a replay.
	var se *commands.StateError
	if _, err := b.w.Resend(b.ctx, m.ID, nil, commands.Action{Operator: "alice"}); !errors.Is(err, commands.ErrNotResendable) ||
		!errors.As(err, &se) || !strings.Contains(se.Reason, "replay") {
		t.Errorf("resend of an empty generation: %v", err)
	}
	b.audit(t)
}

// TestResendRefusals: a message never dispatched, or refused, is not sent
// again.
func TestResendRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	accepted, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "as2", From: "a", To: "b", Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, wantStage lifecycle.MessageStage) {
		t.Helper()
		for name, act := range map[string]func() error{
			"resend": func() error {
				_, err := b.w.Resend(b.ctx, accepted.ID, nil, commands.Action{Operator: "alice"})
				return err
			},
			"replay": func() error { _, err := b.w.Replay(b.ctx, accepted.ID, commands.Action{Operator: "alice"}); return err },
		} {
			var se *commands.StateError
			if err := act(); !errors.As(err, &se) || !errors.Is(err, commands.ErrNotResendable) ||
				se.State != string(wantStage) || se.Reason == "" {
				t.Errorf("%s of a message %s: %v", name, what, err)
			}
		}
	}
	check("never dispatched", lifecycle.StageAccepted)
	if _, err := b.w.Refuse(b.ctx, accepted.ID, lifecycle.RefusalRejected, "signature invalid", "source:as2"); err != nil {
		t.Fatal(err)
	}
	check("refused", lifecycle.StageRefused)
	if _, err := b.w.Resend(b.ctx, uuid.New(), nil, commands.Action{Operator: "alice"}); !errors.Is(err, commands.ErrNotFound) {
		t.Errorf("resend of no message: %v", err)
	}
	b.audit(t)
}

// TestActionsIfVersion: every action named with a version the message has
// moved on from is refused as stale and writes nothing; with the current
// version it acts.
func TestActionsIfVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	actions := []struct {
		name string
		act  func(m *projection.Message, a commands.Action) (*projection.Message, error)
	}{
		{"redeliver", func(m *projection.Message, a commands.Action) (*projection.Message, error) {
			return b.w.Redeliver(b.ctx, m.ID, m.Deliveries[0].ID, a)
		}},
		{"skip", func(m *projection.Message, a commands.Action) (*projection.Message, error) {
			return b.w.Skip(b.ctx, m.ID, m.Deliveries[0].ID, a)
		}},
		{"redispatch", func(m *projection.Message, a commands.Action) (*projection.Message, error) {
			return b.w.Redispatch(b.ctx, m.ID, a)
		}},
		{"resend", func(m *projection.Message, a commands.Action) (*projection.Message, error) {
			return b.w.Resend(b.ctx, m.ID, nil, a)
		}},
		{"replay", func(m *projection.Message, a commands.Action) (*projection.Message, error) {
			return b.w.Replay(b.ctx, m.ID, a)
		}},
	}
	for _, tc := range actions {
		t.Run(tc.name, func(t *testing.T) {
			m := b.ingest(t)
			seen := m.Version
			m = b.settle(t, m.Deliveries[0], lifecycle.Failed("404"))
			before := b.journalLen(t)
			_, err := tc.act(m, commands.Action{Operator: "alice", IfVersion: seen})
			var stale *commands.StaleError
			if !errors.Is(err, commands.ErrStale) || !errors.As(err, &stale) || stale.Want != seen || stale.Current != m.Version {
				t.Fatalf("stale: %v", err)
			}
			if got := b.journalLen(t); got != before {
				t.Fatalf("a stale %s wrote %d events", tc.name, got-before)
			}
			after, err := tc.act(m, commands.Action{Operator: "alice", IfVersion: m.Version})
			if err != nil || after.Version <= m.Version {
				t.Fatalf("at the current version: %v, version %d", err, after.Version)
			}
		})
	}
	if _, err := b.w.Redispatch(b.ctx, uuid.New(), commands.Action{Operator: "alice", IfVersion: -1}); !errors.Is(err, commands.ErrInvalid) {
		t.Errorf("a negative version: %v", err)
	}
	b.audit(t)
}

// TestResendInALane: the new generation joins the back of its lane; the
// failed head it supersedes lets the lane go.
func TestResendInALane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifoTarget(t, "alpha", lifecycle.OnFailureBlock)
	first := b.ingestKeyed(t, "k")
	second := b.ingestKeyed(t, "k")
	first = b.settle(t, first.Deliveries[0], lifecycle.Failed("404"))
	b.wantStates(t, map[uuid.UUID]lifecycle.DeliveryState{first.ID: lifecycle.StateFailed, second.ID: lifecycle.StateBlocked}, first, second)

	m, err := b.w.Resend(b.ctx, first.ID, nil, commands.Action{Operator: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	resent := m.Deliveries[len(m.Deliveries)-1]
	if resent.Generation != 2 || resent.State != lifecycle.StateBlocked || resent.LaneSeq <= second.Deliveries[0].LaneSeq {
		t.Fatalf("resent delivery %+v, behind lane place %d", resent, second.Deliveries[0].LaneSeq)
	}
	if got := b.state(t, second.Deliveries[0]); got != lifecycle.StateQueued {
		t.Fatalf("the follower of the superseded head is %s", got)
	}
	b.settle(t, second.Deliveries[0], lifecycle.Delivered("200"))
	if got := b.state(t, resent); got != lifecycle.StateQueued {
		t.Fatalf("the resent delivery after the lane moved on: %s", got)
	}
	b.audit(t)
}

// TestPossibleDuplicates: a repeated duplicate key of one source names the
// latest earlier message and is delivered all the same; another source's,
// or an idempotency key, is apart.
func TestPossibleDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	ingest := func(source, dup, idem string) *projection.Message {
		t.Helper()
		in := newMessage()
		in.Source, in.DuplicateKey, in.IdempotencyKey = source, dup, idem
		m, _, err := b.w.Ingest(b.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := ingest("erp", "ctl-1", "")
	if first.PossibleDuplicateOf != uuid.Nil || first.DuplicateKey != "ctl-1" {
		t.Fatalf("first: %+v", first)
	}
	second := ingest("erp", "ctl-1", "")
	third := ingest("erp", "ctl-1", "i-3")
	if second.PossibleDuplicateOf != first.ID || third.PossibleDuplicateOf != second.ID {
		t.Fatalf("second names %s, third %s; want %s and %s", second.PossibleDuplicateOf, third.PossibleDuplicateOf, first.ID, second.ID)
	}
	if len(second.Deliveries) != 1 || second.Status != lifecycle.StatusInProgress {
		t.Errorf("a possible duplicate is delivered as usual: %+v", second)
	}
	if again := ingest("erp", "ctl-1", "i-3"); again.ID != third.ID {
		t.Errorf("a repeated idempotency key stored a new message %s", again.ID)
	}
	if other := ingest("as2", "ctl-1", ""); other.PossibleDuplicateOf != uuid.Nil {
		t.Errorf("another source's key: %s", other.PossibleDuplicateOf)
	}
	if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("p"),
		DuplicateKey: string(make([]byte, 256))}); !errors.Is(err, commands.ErrInvalid) {
		t.Errorf("a duplicate key of 256 bytes: %v", err)
	}
	b.audit(t)
}

// TestConcurrentDuplicates: messages with one duplicate key ingested at
// once each name one earlier message, and together form one chain.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 8
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got []*projection.Message
	)
	for range n {
		wg.Go(func() {
			in := newMessage()
			in.DuplicateKey = "ctl-9"
			m, _, err := b.w.Ingest(context.WithoutCancel(b.ctx), in)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		})
	}
	wg.Wait()
	named := map[uuid.UUID]int{}
	var firsts int
	for _, m := range got {
		if m.PossibleDuplicateOf == uuid.Nil {
			firsts++
			continue
		}
		named[m.PossibleDuplicateOf]++
	}
	if firsts != 1 || len(named) != n-1 || slices.ContainsFunc(slices.Collect(maps.Values(named)), func(c int) bool { return c != 1 }) {
		t.Errorf("%d messages name none; named %v", firsts, named)
	}
	b.audit(t)
}
