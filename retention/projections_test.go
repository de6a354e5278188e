package retention_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// The tests of this file remove messages that the lanes, the callbacks,
// the correlations, the possible duplicates and the generations know of,
// and audit after each step: what retention takes out of those projections
// must leave them the fold of the live journal.

// fifo adds a fifo target and routes the shop's messages to it.
func (b *bundle) fifo(t testing.TB, name string) {
	t.Helper()
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`), Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "shop", From: "*", To: "*", Target: name}, admin); err != nil {
		t.Fatal(err)
	}
}

// ingest takes in a message.
func (b *bundle) ingest(t testing.TB, m commands.NewMessage) *projection.Message {
	t.Helper()
	if m.From == "" {
		m.From, m.To, m.Payload = "acme", "globex", []byte("hello "+uuid.NewString())
	}
	out, _, err := b.w.Ingest(b.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mustLive fails the test unless the message is live (want) or gone.
func (b *bundle) mustLive(t testing.TB, id uuid.UUID, want bool) {
	t.Helper()
	if live, _ := b.live(t, id); live != want {
		t.Fatalf("message %s live %v, want %v", id, live, want)
	}
}

// rebuild rebuilds the projections from the live journal and audits them:
// the tables retention left and the rebuilt ones are both the fold of what
// is live.
func (b *bundle) rebuild(t testing.TB) {
	t.Helper()
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %v, %v", r, err)
	}
	b.audit(t)
}

// TestLanesStayWhole: a message with a delivery in a lane that is still
// open stays, due or not; once the lane empties it goes, while a later
// message of the same lane, placed behind it, stays. The audit and a
// rebuild fold that lane from what is left, and a new run of the lane
// after it folds as strictly as ever.
func TestLanesStayWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifo(t, "orders")
	b.retain(t, 0, time.Hour, 0)
	first := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	second := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	if d := second.Deliveries[0]; d.State != lifecycle.StateBlocked || d.LaneSeq != 2 {
		t.Fatalf("the second waits: %+v", d)
	}
	b.attempt(t, first.Deliveries[0].ID, lifecycle.Delivered("200"))
	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 0 {
		t.Fatalf("the lane is open, its head the second: %+v", r)
	}
	b.mustLive(t, first.ID, true)

	b.attempt(t, second.Deliveries[0].ID, lifecycle.Delivered("200"))
	b.clock.Advance(30 * time.Minute)
	if r := b.pass(t); r.Removed() != 1 {
		t.Fatalf("the lane emptied: %+v", r)
	}
	b.mustLive(t, first.ID, false)
	b.mustLive(t, second.ID, true)

	// A new run of the lane begins at its first place.
	third := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	if d := third.Deliveries[0]; d.State != lifecycle.StateQueued || d.LaneSeq != 1 {
		t.Fatalf("the third heads the lane: %+v", d)
	}
	b.rebuild(t)

	// A failed head holds its lane, and its message stays, whatever
	// failed_after says, until the lane empties; so does a message of an
	// earlier run of the lane, which is not told from the open run's.
	b.retain(t, 0, time.Hour, time.Hour)
	b.attempt(t, third.Deliveries[0].ID, lifecycle.Failed("400"))
	fourth := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	b.clock.Advance(2 * time.Hour)
	if r := b.pass(t); r.Removed() != 0 {
		t.Fatalf("the lane is held: %+v", r)
	}
	b.mustLive(t, second.ID, true)
	b.mustLive(t, third.ID, true)
	if _, err := b.w.Skip(b.ctx, third.ID, third.Deliveries[0].ID, commands.Action{Operator: "ops", Reason: "sent by hand"}); err != nil {
		t.Fatal(err)
	}
	b.attempt(t, fourth.Deliveries[0].ID, lifecycle.Delivered("200"))
	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 3 {
		t.Fatalf("the lane emptied again: %+v", r)
	}
}

// TestALaneFoldsAroundARemovedMessage: a message removed from the middle of
// a lane's run, while the head before it stays (its callback keeps it) and
// the one after it is not yet due, leaves a gap in the places and a head
// the journal no longer holds; the audit and a rebuild fold the lane around
// it, and the lane has no row left behind.
func TestALaneFoldsAroundARemovedMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifo(t, "orders")
	b.retain(t, 0, time.Hour, 0)
	head := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1", CallbackURL: "http://127.0.0.1:9/outcome"})
	middle := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	last := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	b.attempt(t, head.Deliveries[0].ID, lifecycle.Delivered("200"))
	b.attempt(t, middle.Deliveries[0].ID, lifecycle.Delivered("200"))
	b.clock.Advance(30 * time.Minute)
	b.attempt(t, last.Deliveries[0].ID, lifecycle.Delivered("200"))
	b.clock.Advance(30 * time.Minute)
	if r := b.pass(t); r.Removed() != 1 {
		t.Fatalf("only the middle one: %+v", r)
	}
	b.mustLive(t, head.ID, true)
	b.mustLive(t, middle.ID, false)
	b.mustLive(t, last.ID, true)
	var lanes int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM lanes`).Scan(&lanes); err != nil || lanes != 0 {
		t.Fatalf("%d lanes left, %v", lanes, err)
	}
	b.rebuild(t)

	// The next run of the lane is folded as strictly as ever.
	next := b.ingest(t, commands.NewMessage{Source: "shop", OrderingKey: "k1"})
	if d := next.Deliveries[0]; d.State != lifecycle.StateQueued || d.LaneSeq != 1 {
		t.Fatalf("the next heads the lane: %+v", d)
	}
	b.audit(t)
}

// TestCallbacksAndCorrelationsLeave: a message whose outcome callback is
// still to be made stays until the call is done; then it goes with its
// callback. A receiver's id leaves with the delivery that last took it,
// even while an earlier delivery that had it is live.
func TestCallbacksAndCorrelationsLeave(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 0)
	called := b.ingest(t, commands.NewMessage{Source: "erp", CallbackURL: "http://127.0.0.1:9/outcome"})
	b.attempt(t, called.Deliveries[0].ID, lifecycle.Delivered("200"))

	handOver := func(id string) *projection.Message {
		t.Helper()
		m := b.ingest(t, commands.NewMessage{Source: "erp"})
		c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		o := lifecycle.AwaitingAck("202 Accepted", b.clock.Now().Add(10*time.Hour))
		o.ExternalID = id
		if _, err := b.w.Complete(b.ctx, m.Deliveries[0].ID, c.Token, o); err != nil {
			t.Fatal(err)
		}
		return m
	}
	receipt := func(id string) {
		t.Helper()
		if _, _, err := b.w.ReceiptByExternalID(b.ctx, commands.ExternalReceipt{Target: "alpha", ExternalID: id, Final: true,
			Positive: true, Status: "DELIVRD"}, "operator:gateway"); err != nil {
			t.Fatal(err)
		}
	}
	earlier := handOver("SM-2") // still awaiting its receipt: live
	once := handOver("SM-1")
	receipt("SM-1")
	later := handOver("SM-2") // takes SM-2 from the earlier one
	receipt("SM-2")

	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 2 {
		t.Fatalf("the two receipted: %+v", r)
	}
	b.mustLive(t, once.ID, false)
	b.mustLive(t, later.ID, false)
	b.mustLive(t, earlier.ID, true)
	b.mustLive(t, called.ID, true)
	var correlations int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM correlations`).Scan(&correlations); err != nil || correlations != 0 {
		t.Fatalf("%d correlations left, %v", correlations, err)
	}

	c, err := b.w.ClaimCallback(b.ctx, called.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CompleteCallback(b.ctx, called.ID, c.Token, lifecycle.Delivered("204 No Content")); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 1 {
		t.Fatalf("the call was made: %+v", r)
	}
	b.mustLive(t, called.ID, false)
	var callbacks int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM callbacks`).Scan(&callbacks); err != nil || callbacks != 0 {
		t.Fatalf("%d callbacks left, %v", callbacks, err)
	}
	// A rebuild gives the earlier delivery its id back; the audit takes
	// either.
	b.rebuild(t)
}

// TestDuplicatesAndGenerations: a possible duplicate outlives the message
// it names; a message sent again leaves with every generation's
// deliveries, the counts by state as the fold has them.
func TestDuplicatesAndGenerations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.retain(t, 0, time.Hour, 0)
	original := b.ingest(t, commands.NewMessage{Source: "erp", DuplicateKey: "MSH-10 42"})
	b.attempt(t, original.Deliveries[0].ID, lifecycle.Delivered("200"))
	duplicate := b.ingest(t, commands.NewMessage{Source: "erp", DuplicateKey: "MSH-10 42"})
	if duplicate.PossibleDuplicateOf != original.ID {
		t.Fatalf("possible duplicate of %s", duplicate.PossibleDuplicateOf)
	}
	b.attempt(t, duplicate.Deliveries[0].ID, lifecycle.Failed("400")) // faulted: stays

	resent := b.settle(t, lifecycle.Failed("400"))
	m, err := b.w.Resend(b.ctx, resent.ID, nil, commands.Action{Operator: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	b.attempt(t, m.Deliveries[len(m.Deliveries)-1].ID, lifecycle.Delivered("200"))

	b.clock.Advance(time.Hour)
	if r := b.pass(t); r.Removed() != 2 {
		t.Fatalf("the original and the resent: %+v", r)
	}
	b.mustLive(t, original.ID, false)
	b.mustLive(t, resent.ID, false)
	b.mustLive(t, duplicate.ID, true)
	b.rebuild(t)
	// A later message of the key names the one still live.
	later := b.ingest(t, commands.NewMessage{Source: "erp", DuplicateKey: "MSH-10 42"})
	if later.PossibleDuplicateOf != duplicate.ID {
		t.Fatalf("possible duplicate of %s, want %s", later.PossibleDuplicateOf, duplicate.ID)
	}
	b.audit(t)
}
