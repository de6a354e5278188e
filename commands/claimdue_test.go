package commands_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// claimDue claims up to n due deliveries of the target and checks that
// each claim is the one stored.
func (b *bundle) claimDue(t *testing.T, target string, n int, lease time.Duration) []commands.Claim {
	t.Helper()
	claims, err := b.w.ClaimDue(b.ctx, target, n, lease)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		d := c.Delivery
		if d.Target != target || d.State != lifecycle.StateDelivering || d.ClaimToken != c.Token ||
			d.Attempts != c.Attempt || !d.LeaseEnd.Equal(c.LeaseEnd) || d.DispatchCount != 0 || !d.NextDue.IsZero() {
			t.Errorf("claim %+v of delivery %+v", c, d)
		}
		if !c.LeaseEnd.Equal(b.clock.Now().Add(lease)) {
			t.Errorf("lease ends %s", c.LeaseEnd)
		}
		stored, err := projection.Load(b.ctx, b.db, d.MessageID)
		if err != nil {
			t.Fatal(err)
		}
		if v := projection.Compare(stored, c.Message); len(v) > 0 {
			t.Errorf("stored differs from the claim's message: %v", v)
		}
	}
	return claims
}

func claimed(claims []commands.Claim) []uuid.UUID {
	ids := make([]uuid.UUID, len(claims))
	for i, c := range claims {
		ids[i] = c.Delivery.ID
	}
	return ids
}

func TestClaimDueTakesWhatAWorkerMay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	// One unclaimed wake-up is the most, so a second one stalls.
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 1}}, admin); err != nil {
		t.Fatal(err)
	}
	// Each message has a delivery to alpha (first) and to beta.
	alpha := func() projection.Delivery { return b.ingest(t).Deliveries[0] }
	claim := func(d projection.Delivery, lease time.Duration) commands.Claim {
		t.Helper()
		c, err := b.w.Claim(b.ctx, d.ID, lease)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	complete := func(c commands.Claim, o lifecycle.Outcome) {
		t.Helper()
		if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, o); err != nil {
			t.Fatal(err)
		}
	}

	// t0
	queued, stalled, retryDue, retryWoken, retryLater, expired, leased, awaiting, delivered :=
		alpha(), alpha(), alpha(), alpha(), alpha(), alpha(), alpha(), alpha(), alpha()
	b.clock.Advance(10 * time.Second) // t1
	if kind, err := b.w.Wake(b.ctx, stalled.ID); err != nil || kind != journal.KindDeliveryStalled {
		t.Fatalf("stall: %q %v", kind, err)
	}
	complete(claim(retryDue, time.Minute), lifecycle.Retry(b.clock.Now().Add(5*time.Second), "503"))
	complete(claim(retryWoken, time.Minute), lifecycle.Retry(b.clock.Now().Add(5*time.Second-lifecycle.WakeGrace), "503"))
	complete(claim(retryLater, time.Minute), lifecycle.Retry(b.clock.Now().Add(time.Hour), "503"))
	oldClaim := claim(expired, 5*time.Second)
	complete(claim(awaiting, time.Minute), lifecycle.AwaitingAck("sent", b.clock.Now().Add(time.Hour)))
	complete(claim(delivered, time.Minute), lifecycle.Delivered("200"))
	b.clock.Advance(5 * time.Second) // t2
	// Woken by the sweep once lifecycle.WakeGrace past its retry time, it
	// is due again only in 10 s, but a worker may take it at once.
	if kind, err := b.w.Wake(b.ctx, retryWoken.ID); err != nil || kind != journal.KindDeliveryWoken {
		t.Fatalf("wake: %q %v", kind, err)
	}
	claim(leased, time.Hour)
	fresh := alpha()
	if _, err := b.w.Claim(b.ctx, retryLater.ID, time.Minute); err == nil {
		t.Fatal("a retrying delivery neither due nor woken was claimed")
	}

	// Oldest due first: queued and stalled since t1, retryDue and the
	// expired lease since t2, then the two due at t2 + 10 s.
	const lease = 2 * time.Minute
	first := b.claimDue(t, "alpha", 4, lease)
	if got, want := claimed(first), []uuid.UUID{queued.ID, stalled.ID, retryDue.ID, expired.ID}; !sameSet(got, want) {
		t.Errorf("first claims %v, want %v", got, want)
	}
	b.audit(t) // four claimed, the rest retrying, awaiting a receipt or leased
	rest := b.claimDue(t, "alpha", 100, lease)
	if got, want := claimed(rest), []uuid.UUID{retryWoken.ID, fresh.ID}; !sameSet(got, want) {
		t.Errorf("then %v, want %v", got, want)
	}
	if again := b.claimDue(t, "alpha", 100, lease); len(again) != 0 {
		t.Errorf("claimed again: %v", claimed(again))
	}

	// The expired lease was journaled before the new claim, and the old
	// claim is lost.
	kinds := dbtest.Kinds(t, b.db, expired)
	if want := []journal.Kind{journal.KindDeliveryClaimed, journal.KindDeliveryLeaseExpired, journal.KindDeliveryClaimed}; !slices.Equal(kinds, want) {
		t.Errorf("expired lease: events %v, want %v", kinds, want)
	}
	if _, err := b.w.Complete(b.ctx, expired.ID, oldClaim.Token, lifecycle.Delivered("late")); err == nil {
		t.Error("the expired claim completed")
	}
	for _, c := range append(first, rest...) {
		if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200")); err != nil {
			t.Errorf("complete delivery %s: %v", c.Delivery.ID, err)
		}
	}

	// Beta's deliveries were left alone.
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM deliveries WHERE target = 'beta' AND state = 'queued'`).Scan(&n); err != nil || n != 10 {
		t.Errorf("%d of beta's 10 deliveries queued, %v", n, err)
	}
	b.audit(t)
}

func sameSet(a, b []uuid.UUID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

func TestClaimDueRefusesBadArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		n     int
		lease time.Duration
	}{{0, time.Minute}, {1, 0}, {-1, -time.Second}} {
		if _, err := b.w.ClaimDue(b.ctx, "alpha", c.n, c.lease); err == nil {
			t.Errorf("n %d lease %s: no error", c.n, c.lease)
		}
	}
}

func TestConcurrentClaimDueShareTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	const total = 70
	for range total {
		b.ingest(t)
	}

	// Four workers of one target take small batches until they find none.
	var (
		mu     sync.Mutex
		claims []commands.Claim
		wg     sync.WaitGroup
	)
	start := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			<-start
			for {
				got, err := b.w.ClaimDue(b.ctx, "alpha", 7, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				claims = append(claims, got...)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	ids := claimed(claims)
	if len(ids) != total {
		t.Errorf("%d claims of %d deliveries", len(ids), total)
	}
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return slices.Compare(x[:], y[:]) })
	if len(slices.Compact(ids)) != len(ids) {
		t.Error("a delivery was claimed twice")
	}
	for _, c := range claims {
		if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200")); err != nil {
			t.Errorf("complete delivery %s: %v", c.Delivery.ID, err)
		}
	}

	rows, err := b.db.Query(b.ctx, `SELECT delivery_id, count(*) FROM journal WHERE kind = $1 GROUP BY delivery_id HAVING count(*) <> 1`,
		journal.KindDeliveryClaimed)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil || len(twice) > 0 {
		t.Errorf("claimed other than once: %v %v", twice, err)
	}
	var left int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM deliveries WHERE state <> 'delivered'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d deliveries not delivered, %v", left, err)
	}
	b.audit(t)
}

// TestClaimDueWalksTheIndex: with statistics taken while the table was
// empty, as when a backlog builds up between two runs of autovacuum, the
// claim still walks deliveries_claimable in its order with a limit rather
// than reading and sorting the whole backlog, and reads the messages it
// chose by their keys. Nothing in it sorts: with sorts off, a sort's cost
// made PostgreSQL compile the statement where JIT is on (ChooseSQL).
func TestClaimDueWalksTheIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	if _, err := b.db.Exec(b.ctx, `ANALYZE deliveries; ANALYZE messages`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 150 {
				if _, _, err := b.w.Ingest(b.ctx, newMessage()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	tx, err := b.db.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx)
	if _, err := tx.Exec(b.ctx, commands.ClaimPlanSQL); err != nil {
		t.Fatal(err)
	}
	// From the index's start, and from a cursor; for a target with limits
	// and one without.
	for _, from := range []pgtype.Timestamptz{{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
		{Time: b.clock.Now().Add(-time.Minute), Valid: true}} {
		args := []any{"alpha", b.clock.Now(), 10, from, 0}
		for _, c := range []struct {
			sql  string
			args []any
		}{{projection.ClaimableChoiceSQL, args}, {projection.UnlimitedChoiceSQL, args[:4]}} {
			// The bound starts the walk: it is a condition of the index.
			p := dbtest.Explain(t, tx, c.sql, c.args...)
			choice, read, ok := strings.Cut(p, "CTE Scan on chosen")
			if !ok || !strings.Contains(choice, "Index Scan using deliveries_claimable") ||
				!strings.Contains(choice, "Index Cond: ((target = 'alpha'::text) AND (COALESCE(") ||
				strings.Contains(p, "Sort") || strings.Contains(p, "JIT") || strings.Contains(p, "Bitmap") ||
				strings.Contains(p, "Seq Scan") || !strings.Contains(read, "Index Cond: (id = ch.message_id)") {
				t.Errorf("the claim's plan from %v:\n%s", from, p)
			}
		}
	}
}

// TestClaimDueFindsWhatItsCursorPassed: a choice starts at the due key at
// which the target's last full choice began, and what it so passes over,
// here a delivery skipped while another transaction held its message, the
// next choice from the index's start claims: once claimRescan has passed,
// or after a choice that came up short.
func TestClaimDueFindsWhatItsCursorPassed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	ingest := func(n int) []uuid.UUID {
		var ids []uuid.UUID
		for range n {
			ids = append(ids, b.ingest(t).Deliveries[0].ID)
			b.clock.Advance(time.Second)
		}
		return ids
	}
	// claimHeld claims n while the message of held is locked, as another
	// batch would hold it.
	claimHeld := func(held uuid.UUID, n int) []uuid.UUID {
		t.Helper()
		tx, err := b.db.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		if _, err := tx.Exec(b.ctx, `SELECT FROM messages m JOIN deliveries d ON d.message_id = m.id
			WHERE d.id = $1 FOR UPDATE OF m`, held); err != nil {
			t.Fatal(err)
		}
		return claimed(b.claimDue(t, "alpha", n, time.Minute))
	}
	check := func(what string, got []uuid.UUID, want ...uuid.UUID) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: claimed %v, want %v", what, got, want)
		}
	}

	d := ingest(4)
	check("beside the held message", claimHeld(d[0], 1), d[1])
	check("from the cursor", claimed(b.claimDue(t, "alpha", 1, time.Minute)), d[2])
	b.clock.Advance(commands.ClaimRescan)
	check("from the start, after claimRescan", claimed(b.claimDue(t, "alpha", 1, time.Minute)), d[0])
	check("from the new cursor", claimed(b.claimDue(t, "alpha", 1, time.Minute)), d[3])

	e := ingest(3)
	check("beside the held message", claimHeld(e[0], 1), e[1])
	check("from the cursor, short", claimed(b.claimDue(t, "alpha", 2, time.Minute)), e[2])
	check("from the start, after the short choice", claimed(b.claimDue(t, "alpha", 2, time.Minute)), e[0])
}

// TestCompleteClaimsTheOldestDueDelivery: on a target without lanes, a
// worker's outcome that asks for it claims the target's oldest due
// delivery in the same transaction, as ClaimDue would, for the same
// worker, with its payload; none when nothing is due, when the target is
// disabled, when the outcome does not ask for one, or when the Writer has
// not written the delivery and so does not know its target.
func TestCompleteClaimsTheOldestDueDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	var ms []*projection.Message
	for range 3 {
		ms = append(ms, b.ingest(t))
		b.clock.Advance(time.Second)
	}
	delivery := func(m *projection.Message, target string) uuid.UUID {
		for _, d := range m.Deliveries {
			if d.Target == target {
				return d.ID
			}
		}
		t.Fatalf("message %s has no delivery to %s", m.ID, target)
		return uuid.Nil
	}
	b.wake.take()
	c, err := b.w.Claim(b.ctx, delivery(ms[0], "alpha"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, next, err := b.w.CompleteAndClaimNext(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200"), time.Minute, true)
	if err != nil || next == nil {
		t.Fatalf("the first delivered: %v, next %v", err, next)
	}
	if next.Delivery.ID != delivery(ms[1], "alpha") || next.Delivery.State != lifecycle.StateDelivering || next.Attempt != 1 ||
		next.Delivery.ClaimToken != next.Token || string(next.Payload) != string(newMessage().Payload) ||
		!next.LeaseEnd.Equal(b.clock.Now().Add(time.Minute)) {
		t.Fatalf("the next claim %+v", next)
	}
	stored, err := projection.Load(b.ctx, b.db, ms[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if v := projection.Compare(stored, next.Message); len(v) > 0 {
		t.Errorf("stored differs from the claim's message: %v", v)
	}
	events, err := journal.Stream(b.ctx, b.db, journal.MessageStream(ms[1].ID))
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Kind() != "delivery.claimed" || last.Actor != journal.WorkerActor("alpha") {
		t.Fatalf("the next delivery's last event %s by %s", last.Kind(), last.Actor)
	}
	if got := b.wake.take(); len(got) != 0 {
		t.Errorf("wake-ups for a delivery claimed already: %v", got)
	}
	// Audited in flight: one delivered, one delivering, the rest queued.
	b.audit(t)

	// A retry due later claims the next all the same; once nothing is due,
	// an outcome claims nothing.
	_, next, err = b.w.CompleteAndClaimNext(b.ctx, next.Delivery.ID, next.Token, lifecycle.Retry(b.clock.Now().Add(time.Hour), "503"), time.Minute, true)
	if err != nil || next == nil || next.Delivery.ID != delivery(ms[2], "alpha") {
		t.Fatalf("a retry: %v, next %v", err, next)
	}
	if _, next, err = b.w.CompleteAndClaimNext(b.ctx, next.Delivery.ID, next.Token, lifecycle.Delivered("200"), time.Minute, true); err != nil || next != nil {
		t.Fatalf("nothing due: %v, next %v", err, next)
	}

	// beta's deliveries are all due: a Writer that has not written the
	// delivery claims none next, and neither does a disabled target.
	c, err = b.w.Claim(b.ctx, delivery(ms[0], "beta"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, next, err = other.CompleteAndClaimNext(b.ctx, c.Delivery.ID, c.Token, lifecycle.Retry(b.clock.Now(), "503"), time.Minute, true); err != nil || next != nil {
		t.Fatalf("a Writer that has not written the delivery: %v, next %v", err, next)
	}
	if c, err = b.w.Claim(b.ctx, delivery(ms[0], "beta"), time.Minute); err != nil {
		t.Fatal(err)
	}
	// Nor does an outcome that does not ask for a due one.
	if _, next, err = b.w.CompleteAndClaimNext(b.ctx, c.Delivery.ID, c.Token, lifecycle.Retry(b.clock.Now(), "503"), time.Minute, false); err != nil || next != nil {
		t.Fatalf("no due one asked for: %v, next %v", err, next)
	}
	if c, err = b.w.Claim(b.ctx, delivery(ms[0], "beta"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.UpdateTarget(b.ctx, lifecycle.Target{Name: "beta", Kind: "http", Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	if _, next, err = b.w.CompleteAndClaimNext(b.ctx, c.Delivery.ID, c.Token, lifecycle.Delivered("200"), time.Minute, true); err != nil || next != nil {
		t.Fatalf("a disabled target: %v, next %v", err, next)
	}
	b.audit(t)
}

// TestClaimDueTakesTheClockOnceLocked: the clock a catch-up's claims are
// recorded at is read once their rows are locked, not when the choice
// began. An operator's redelivery recorded in between at a later time
// (here the clock moves on between the two readings) is never followed on
// its stream by a claim with an earlier time and a lease already over.
func TestClaimDueTakesTheClockOnceLocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	m := b.ingest(t)
	later := b.clock.Now().Add(100 * time.Hour)
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: testclock.AfterFirstRead(b.clock.Now(), later)}, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := w.ClaimDue(b.ctx, "alpha", 1, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claims %v, %v", claims, err)
	}
	if c := claims[0]; c.Delivery.ID != m.Deliveries[0].ID || !c.LeaseEnd.Equal(later.Add(time.Minute)) {
		t.Fatalf("the claim's lease ends %s, want %s", c.LeaseEnd, later.Add(time.Minute))
	}
	b.audit(t)
}

// TestClaimDueDecidesAgainOnAVersionTaken: a catch-up's claim whose
// event's version another transaction took meanwhile (the choice checks
// the message row's version, and another delivery of the message moved
// after its snapshot) is decided again on what it reads anew, as a
// batch's command is, rather than fail. A trigger makes the first append
// of a claim meet the conflict.
func TestClaimDueDecidesAgainOnAVersionTaken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "billing")
	m := b.ingest(t)
	// A sequence, as the failed transaction rolls back all but its draws.
	if _, err := b.db.Exec(b.ctx, `CREATE SEQUENCE journal_fault;
		CREATE FUNCTION journal_fault() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.kind = 'delivery.claimed' AND nextval('journal_fault') = 1 THEN
				RAISE EXCEPTION 'version taken' USING ERRCODE = '23505', CONSTRAINT = 'journal_stream_version_key';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER journal_fault BEFORE INSERT ON journal FOR EACH ROW EXECUTE FUNCTION journal_fault();`); err != nil {
		t.Fatal(err)
	}
	claims, err := b.w.ClaimDue(b.ctx, "billing", 5, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].Delivery.ID != m.Deliveries[0].ID {
		t.Fatalf("ClaimDue after a version taken: %+v, %v", claims, err)
	}
	var drawn int
	if err := b.db.QueryRow(b.ctx, `SELECT last_value FROM journal_fault`).Scan(&drawn); err != nil || drawn != 2 {
		t.Fatalf("the claim was appended %d times, want twice: %v", drawn, err)
	}
	b.audit(t)
}
