package commands_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// raceChecks is how many sequences each property test runs under the race
// detector, where a command costs several times what it does without: a
// run without -race (or one given -rapid.checks) runs rapid's default
// of 100.
const raceChecks = "30"

func TestMain(m *testing.M) {
	flag.Parse()
	if race {
		given := false
		flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
		if !given {
			flag.Set("rapid.checks", raceChecks)
		}
	}
	dbtest.Main(m)
}

// wakeups records what a Writer notifies.
type wakeups struct {
	mu  sync.Mutex
	got []commands.Wakeup
}

func (n *wakeups) Notify(ws []commands.Wakeup) {
	n.mu.Lock()
	n.got = append(n.got, ws...)
	n.mu.Unlock()
}

func (n *wakeups) take() []commands.Wakeup {
	n.mu.Lock()
	defer n.mu.Unlock()
	got := n.got
	n.got = nil
	return got
}

type bundle struct {
	ctx   context.Context
	db    *pgxpool.Pool
	w     *commands.Writer
	clock *testclock.Clock
	wake  *wakeups
}

func setup(t testing.TB) *bundle {
	t.Helper()
	ctx := t.Context()
	db := dbtest.Pool(t)
	var err error
	b := &bundle{ctx: ctx, db: db, clock: testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)), wake: &wakeups{}}
	if b.w, err = newWriter(b, b.wake); err != nil {
		t.Fatal(err)
	}
	return b
}

func newWriter(b *bundle, n commands.Notifier) (*commands.Writer, error) {
	return commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now}, DB: b.db, Notifier: n})
}

func newMessage() commands.NewMessage {
	return commands.NewMessage{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain", Payload: []byte("hello")}
}

const admin = "operator:admin"

// sinkConfig is an http target's configuration; nothing is sent in these tests.
var sinkConfig = json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)

// targets creates the named targets and a route from source "erp" for any
// parties to each.
func (b *bundle) targets(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: sinkConfig}, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *bundle) ingest(t *testing.T) *projection.Message {
	t.Helper()
	m, created, err := b.w.Ingest(b.ctx, newMessage())
	if err != nil || !created {
		t.Fatalf("ingest: created %v, %v", created, err)
	}
	return m
}

// audit fails the test on any violation.
func (b *bundle) audit(t *testing.T) {
	t.Helper()
	dbtest.Audit(t, b.db)
}

func TestIngestDispatchesToEveryMatchedTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	// A second route to alpha overlaps the first: still one delivery.
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "acme", To: "*", Target: "alpha"}, admin); err != nil {
		t.Fatal(err)
	}
	m := b.ingest(t)
	if m.Stage != lifecycle.StageDispatched || m.Status != lifecycle.StatusInProgress || len(m.Deliveries) != 2 {
		t.Fatalf("got stage %s status %s with %d deliveries", m.Stage, m.Status, len(m.Deliveries))
	}
	for i, d := range m.Deliveries {
		if d.State != lifecycle.StateQueued || d.Seq != i+1 || d.DispatchCount != 1 {
			t.Errorf("delivery %d: %+v", i, d)
		}
	}
	if got := b.wake.take(); len(got) != 2 || got[0].Target != "alpha" || got[1].Target != "beta" {
		t.Errorf("wake-ups %v", got)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(m.ID))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Kind() != journal.KindMessageAccepted || events[1].Kind() != journal.KindMessageDispatched {
		t.Fatalf("events %v", events)
	}
	stored, err := projection.Load(b.ctx, b.db, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v := projection.Compare(stored, m); len(v) > 0 {
		t.Errorf("stored differs from returned: %v", v)
	}
	b.audit(t)
}

func TestIngestNotRoutedAndIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"), IdempotencyKey: "k1"}
	m, created, err := b.w.Ingest(b.ctx, in)
	if err != nil || !created || m.Status != lifecycle.StatusNotRouted {
		t.Fatalf("first ingest: %v %v %+v", created, err, m)
	}
	again, created, err := b.w.Ingest(b.ctx, in)
	if err != nil || created || again.ID != m.ID {
		t.Fatalf("repeat: created %v id %v, %v", created, again, err)
	}
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM messages`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d messages, %v", n, err)
	}
	b.audit(t)
}

func TestIngestRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "ERP!", From: "", To: "b"})
	var fe *lifecycle.FieldError
	if !errors.Is(err, commands.ErrInvalid) || !errors.As(err, &fe) {
		t.Fatalf("got %v", err)
	}
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM journal`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d events written, %v", n, err)
	}
}

func TestClaimCompleteAndStaleToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if claim.Attempt != 1 || claim.Delivery.State != lifecycle.StateDelivering || claim.Delivery.DispatchCount != 0 {
		t.Fatalf("claim %+v", claim.Delivery)
	}
	if _, err := b.w.Claim(b.ctx, d.ID, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
		t.Fatalf("second claim: %v", err)
	}
	if _, err := b.w.Complete(b.ctx, d.ID, uuid.New(), lifecycle.Delivered("200")); !errors.Is(err, commands.ErrClaimLost) {
		t.Fatalf("stale token: %v", err)
	}
	m, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.Delivered("200 OK"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != lifecycle.StatusDelivered || m.Deliveries[0].FinishedAt.IsZero() {
		t.Errorf("after complete: %s %+v", m.Status, m.Deliveries[0])
	}
	if _, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.Delivered("again")); !errors.Is(err, commands.ErrClaimLost) {
		t.Errorf("second complete: %v", err)
	}
	b.audit(t)
}

// TestClaimsReadThePayload: Claim and ClaimDue hand back each message's
// body with the claim.
func TestClaimsReadThePayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	var ms []*projection.Message
	for i := range 3 {
		in := newMessage()
		in.Payload = fmt.Appendf(nil, "body %d", i)
		m, _, err := b.w.Ingest(b.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	claim, err := b.w.Claim(b.ctx, ms[0].Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if string(claim.Payload) != "body 0" {
		t.Errorf("Claim: payload %q, want %q", claim.Payload, "body 0")
	}
	claims, err := b.w.ClaimDue(b.ctx, "alpha", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 2 {
		t.Fatalf("ClaimDue: %d claims, want 2", len(claims))
	}
	for _, c := range claims {
		i := slices.IndexFunc(ms, func(m *projection.Message) bool { return m.ID == c.Message.ID })
		if want := fmt.Sprintf("body %d", i); string(c.Payload) != want {
			t.Errorf("ClaimDue: message %d: payload %q, want %q", i, c.Payload, want)
		}
	}
	b.audit(t)
}

func TestRetryReleaseAndLeaseExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.Retry(b.clock.Now().Add(time.Hour), "503"))
	if err != nil || m.Status != lifecycle.StatusRetrying {
		t.Fatalf("retry: %v %v", m, err)
	}
	if _, err := b.w.Claim(b.ctx, d.ID, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
		t.Fatalf("claim before due: %v", err)
	}
	b.clock.Advance(time.Hour)
	claim, err = b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil || claim.Attempt != 2 {
		t.Fatalf("claim when due: %+v %v", claim, err)
	}
	m, err = b.w.Release(b.ctx, d.ID, claim.Token, false, "stopping")
	if err != nil || m.Deliveries[0].State != lifecycle.StateQueued || m.Deliveries[0].Attempts != 1 {
		t.Fatalf("release before I/O: %+v %v", m.Deliveries[0], err)
	}
	claim, err = b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The worker dies; the sweep expires the lease once it has run out.
	if kind, err := b.w.ExpireLease(b.ctx, d.ID); err != nil || kind != "" {
		t.Fatalf("expire before the lease end: %q %v", kind, err)
	}
	b.clock.Advance(time.Minute)
	if kind, err := b.w.ExpireLease(b.ctx, d.ID); err != nil || kind != journal.KindDeliveryLeaseExpired {
		t.Fatalf("expire: %q %v", kind, err)
	}
	if _, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.Delivered("late")); !errors.Is(err, commands.ErrClaimLost) {
		t.Fatalf("complete after expiry: %v", err)
	}
	m, err = projection.Load(b.ctx, b.db, m.ID)
	if err != nil || m.Deliveries[0].State != lifecycle.StateRetrying {
		t.Fatalf("after expiry: %+v %v", m, err)
	}
	b.audit(t)
}

func TestWakeUntilStalledThenClaimAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	b.wake.take()
	if kind, _ := b.w.Wake(b.ctx, d.ID); kind != "" {
		t.Fatalf("woken before due: %s", kind)
	}
	for n := 2; n <= lifecycle.DefaultMaxDispatches; n++ {
		b.clock.Advance(lifecycle.DispatchBackoff(n - 1))
		kind, err := b.w.Wake(b.ctx, d.ID)
		if err != nil || kind != journal.KindDeliveryWoken {
			t.Fatalf("wake %d: %q %v", n, kind, err)
		}
	}
	if got := b.wake.take(); len(got) != lifecycle.DefaultMaxDispatches-1 {
		t.Errorf("%d wake-ups published", len(got))
	}
	b.clock.Advance(lifecycle.DispatchBackoff(lifecycle.DefaultMaxDispatches))
	kind, err := b.w.Wake(b.ctx, d.ID)
	if err != nil || kind != journal.KindDeliveryStalled {
		t.Fatalf("stall: %q %v", kind, err)
	}
	m, err := projection.Load(b.ctx, b.db, d.MessageID)
	if err != nil || m.Status != lifecycle.StatusStalled || m.Error != "not claimed by alpha after 5 wake-ups" {
		t.Fatalf("stalled: %s %q %v", m.Status, m.Error, err)
	}
	if _, err := b.w.Claim(b.ctx, d.ID, time.Minute); err != nil {
		t.Fatalf("claim a stalled delivery: %v", err)
	}
	b.audit(t)
}

func TestReceipts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.AwaitingAck("sent", b.clock.Now().Add(24*time.Hour)))
	if err != nil || m.Status != lifecycle.StatusAwaitingReceipt {
		t.Fatalf("awaiting: %v %v", m, err)
	}
	if kind, _ := b.w.TimeoutReceipt(b.ctx, d.ID); kind != "" {
		t.Fatalf("timed out early: %s", kind)
	}
	long := strings.Repeat("x", lifecycle.MaxReceiptTextLength+1)
	if _, err := b.w.Receipt(b.ctx, d.ID, true, long, "source:partner"); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("a receipt of too long a text: %v", err)
	}
	m, err = b.w.Receipt(b.ctx, d.ID, true, "MDN ok", "source:partner")
	if err != nil || m.Status != lifecycle.StatusDelivered {
		t.Fatalf("positive receipt: %v %v", m, err)
	}
	_, err = b.w.Receipt(b.ctx, d.ID, true, "again", "source:partner")
	var se *commands.StateError
	if !errors.Is(err, commands.ErrReceiptRefused) || !errors.As(err, &se) || se.State != "delivered" {
		t.Fatalf("late receipt: %v", err)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(d.MessageID))
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Kind() != journal.KindReceiptRefused || last.OldState != last.NewState {
		t.Errorf("last event %s %s -> %s", last.Kind(), last.OldState, last.NewState)
	}

	// A second delivery times out.
	_, err = b.w.Redeliver(b.ctx, d.MessageID, d.ID, commands.Action{Operator: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	claim, err = b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.AwaitingAck("sent", b.clock.Now().Add(2*time.Hour))); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * time.Hour)
	if kind, err := b.w.TimeoutReceipt(b.ctx, d.ID); err != nil || kind != journal.KindReceiptTimedOut {
		t.Fatalf("time out: %q %v", kind, err)
	}
	m, err = projection.Load(b.ctx, b.db, d.MessageID)
	if err != nil || m.Status != lifecycle.StatusError || m.Error != "no receipt within 2h0m0s" {
		t.Fatalf("after time-out: %s %q %v", m.Status, m.Error, err)
	}
	b.audit(t)
}

func TestOperatorActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	m := b.ingest(t)
	d := m.Deliveries[0]
	_, err := b.w.Redeliver(b.ctx, m.ID, d.ID, commands.Action{Operator: "admin"})
	var se *commands.StateError
	if !errors.Is(err, commands.ErrNotRedeliverable) || !errors.As(err, &se) || se.State != "queued" || len(se.Allowed) != 5 {
		t.Fatalf("redeliver queued: %v", err)
	}
	if _, err := b.w.Redeliver(b.ctx, m.ID, uuid.New(), commands.Action{Operator: "admin"}); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("redeliver unknown: %v", err)
	}
	// A route added later: redispatch adds its target only.
	b.targets(t, "beta")
	m, err = b.w.Redispatch(b.ctx, m.ID, commands.Action{Operator: "admin"})
	if err != nil || len(m.Deliveries) != 2 || m.Deliveries[1].Target != "beta" || m.Deliveries[1].Seq != 2 {
		t.Fatalf("redispatch: %+v %v", m, err)
	}
	accepted, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "as2", From: "a", To: "b", Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	refusedMsg, err := b.w.Refuse(b.ctx, accepted.ID, lifecycle.RefusalRejected, "signature invalid", "source:as2")
	if err != nil || refusedMsg.Status != lifecycle.StatusRefused {
		t.Fatalf("refuse: %v %v", refusedMsg, err)
	}
	if _, err := b.w.Redispatch(b.ctx, accepted.ID, commands.Action{Operator: "admin"}); !errors.Is(err, commands.ErrNotRedispatchable) {
		t.Fatalf("redispatch refused: %v", err)
	}
	if _, err := b.w.Refuse(b.ctx, accepted.ID, lifecycle.RefusalInternal, "again", "source:as2"); !errors.Is(err, commands.ErrNotAccepted) {
		t.Fatalf("refuse twice: %v", err)
	}
	b.audit(t)
}

func TestConfiguration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "nowhere"}, admin); !errors.Is(err, commands.ErrInvalidTarget) {
		t.Fatalf("route to unknown target: %v", err)
	}
	b.targets(t, "alpha")
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "alpha", Kind: "file", Config: json.RawMessage(`{"dir":"/tmp"}`)}, admin); !errors.Is(err, commands.ErrExists) {
		t.Fatalf("duplicate target: %v", err)
	}
	if err := b.w.DeleteTarget(b.ctx, "alpha", admin); !errors.Is(err, commands.ErrTargetInUse) {
		t.Fatalf("delete target in use: %v", err)
	}
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 21}}, admin); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("max_dispatches 21: %v", err)
	}
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 2}}, admin); err != nil {
		t.Fatal(err)
	}
	s, err := b.w.Settings(b.ctx)
	if err != nil || s.Delivery.MaxDispatches != 2 {
		t.Fatalf("settings %+v %v", s, err)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil || len(events) != 4 { // a target and its key, a route, the settings
		t.Fatalf("%d config events, %v", len(events), err)
	}
}

func TestJournalRefusesChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.ingest(t)
	for _, sql := range []string{`UPDATE journal SET actor = 'system'`, `DELETE FROM journal`, `TRUNCATE journal`} {
		if _, err := b.db.Exec(b.ctx, sql); err == nil {
			t.Errorf("%s was allowed", sql)
		}
	}
}

func TestConcurrentClaimsOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	var wg sync.WaitGroup
	results := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := b.w.Claim(b.ctx, d.ID, time.Minute)
			results <- err
		})
	}
	wg.Wait()
	close(results)
	won := 0
	for err := range results {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, commands.ErrNotClaimable):
			t.Errorf("claim: %v", err)
		}
	}
	if won != 1 {
		t.Errorf("%d claims won", won)
	}
	b.audit(t)
}

func TestCompleteRefusesAPastDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0]
	claim, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.w.Complete(b.ctx, d.ID, claim.Token, lifecycle.AwaitingAck("sent", b.clock.Now()))
	var fe *lifecycle.FieldError
	if !errors.Is(err, commands.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "outcome.deadline" {
		t.Fatalf("past deadline: %v", err)
	}
}
