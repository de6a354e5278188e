package commands_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
)

// lockBundle is two Writers, as two processes would have, on a pool of
// their own, whose sessions are found in pg_stat_activity by their
// application name.
type lockBundle struct {
	*bundle
	app   string
	pool  *pgxpool.Pool
	w, w2 *commands.Writer
	lost  atomic.Int64
}

func setupLock(t *testing.T) *lockBundle {
	t.Helper()
	b := setup(t)
	cfg := b.db.Config() // a copy, on the test's database
	lb := &lockBundle{bundle: b, app: "waybill-lock-" + uuid.NewString()[:8]}
	cfg.ConnConfig.RuntimeParams["application_name"] = lb.app
	cfg.MaxConns = 4
	var err error
	if lb.pool, err = pgxpool.NewWithConfig(b.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lb.pool.Close)
	for _, w := range []**commands.Writer{&lb.w, &lb.w2} {
		if *w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now}, DB: lb.pool, Notifier: b.wake}); err != nil {
			t.Fatal(err)
		}
		(*w).SetLost(func(error) { lb.lost.Add(1) })
	}
	return lb
}

// sessions counts the Writer's sessions by state, and those waiting on a lock.
func (lb *lockBundle) sessions(t *testing.T) (byState map[string]int, waiting int) {
	t.Helper()
	rows, err := lb.db.Query(lb.ctx, `SELECT coalesce(state, ''), coalesce(wait_event_type, '') = 'Lock'
		FROM pg_stat_activity WHERE application_name = $1`, lb.app)
	if err != nil {
		t.Fatal(err)
	}
	byState = map[string]int{}
	var (
		state string
		lock  bool
	)
	_, err = pgx.ForEachRow(rows, []any{&state, &lock}, func() error {
		byState[state]++
		if lock {
			waiting++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byState, waiting
}

// noLostRacesAndAudit fails the test if a command lost a race, which it
// does only when it read a state another command changed under it, or if
// the tables and the journal disagree.
func (lb *lockBundle) noLostRacesAndAudit(t *testing.T) {
	t.Helper()
	if n := lb.lost.Load(); n != 0 {
		t.Errorf("%d lost races", n)
	}
	lb.audit(t)
}

// batchSizes records the size of every batch lb.w writes from now on; the
// returned function gives them, in order.
func (lb *lockBundle) batchSizes() func() []int {
	var (
		mu    sync.Mutex
		sizes []int
	)
	lb.w.SetBatched(func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	})
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}

// holdMessage locks the message row in a transaction of another session
// until the returned function commits it, changing nothing; a test that
// ends first commits it on cleanup, so nothing waits on it for ever.
func (lb *lockBundle) holdMessage(t *testing.T, id uuid.UUID) func() {
	t.Helper()
	tx, err := lb.db.Begin(lb.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(lb.ctx, `SELECT FROM messages WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			if err := tx.Commit(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// busy makes every batch lb.w may have open wait on the lock of a new
// message of its own: each is a dispatch of it, which changes nothing.
// Commands made until the returned function releases the locks queue for
// the next batch.
func (lb *lockBundle) busy(t *testing.T) (release func()) {
	t.Helper()
	var (
		unlocks []func()
		wg      sync.WaitGroup
	)
	for i := range commands.MaxLeaders {
		held := lb.ingest(t)
		unlocks = append(unlocks, lb.holdMessage(t, held.ID))
		wg.Go(func() {
			if _, err := lb.w.Dispatch(lb.ctx, held.ID, admin); err != nil {
				t.Error(err)
			}
		})
		lb.untilWaiting(t, i+1)
	}
	return func() {
		for _, unlock := range unlocks {
			unlock()
		}
		wg.Wait()
	}
}

// untilPending waits until n commands wait for a batch.
func (lb *lockBundle) untilPending(t *testing.T, n int) {
	t.Helper()
	testpoll.Until(t, fmt.Sprintf("%d commands pending", n), func() bool { return lb.w.Pending() == n })
}

// untilWaiting waits until n of the Writer's sessions wait on a lock.
func (lb *lockBundle) untilWaiting(t *testing.T, n int) {
	t.Helper()
	testpoll.Until(t, fmt.Sprintf("%d sessions waiting on a lock", n), func() bool {
		_, waiting := lb.sessions(t)
		return waiting == n
	})
}

// both runs f on the two deliveries at once, each on a Writer of its own,
// both held up behind a lock of their message until both wait, and fails
// the test unless both succeed.
func (lb *lockBundle) both(t *testing.T, messageID uuid.UUID, deliveries [2]uuid.UUID, f func(w *commands.Writer, id uuid.UUID) error) {
	t.Helper()
	release := lb.holdMessage(t, messageID)
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for i, id := range deliveries {
		w := []*commands.Writer{lb.w, lb.w2}[i]
		wg.Go(func() { errs[i] = f(w, id) })
		lb.untilWaiting(t, i+1)
	}
	release()
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
}

// TestRacingCommandsWait runs the claims, then the completes, of the two
// deliveries of one message at the same time from two Writers, as two
// processes would: each command waits for the other's lock on the message
// row and reads what it committed, so both succeed without losing a race.
func TestRacingCommandsWait(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "alpha", "beta")
	for range 3 {
		m := lb.ingest(t)
		ids := [2]uuid.UUID{m.Deliveries[0].ID, m.Deliveries[1].ID}
		var tokens sync.Map
		lb.both(t, m.ID, ids, func(w *commands.Writer, id uuid.UUID) error {
			c, err := w.Claim(lb.ctx, id, time.Minute)
			tokens.Store(id, c.Token)
			return err
		})
		lb.both(t, m.ID, ids, func(w *commands.Writer, id uuid.UUID) error {
			token, _ := tokens.Load(id)
			_, err := w.Complete(lb.ctx, id, token.(uuid.UUID), lifecycle.Delivered("200 OK"))
			return err
		})
		done, err := lb.w.Claim(lb.ctx, ids[0], time.Minute)
		if !errors.Is(err, commands.ErrNotClaimable) {
			t.Fatalf("claim of a delivered delivery: %+v, %v", done, err)
		}
	}
	if states, _ := lb.sessions(t); states["idle"] != total(states) {
		t.Errorf("sessions %v", states)
	}
	lb.noLostRacesAndAudit(t)
}

// TestFailedCommandsLeaveNoTransaction fails commands at each step of their
// transaction: the pool's sessions are all idle after, none idle in a
// transaction, and the row lock is free for the next command.
func TestFailedCommandsLeaveNoTransaction(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "alpha")
	d := lb.ingest(t).Deliveries[0]
	// idle waits for the pool to have every connection back (it closes a
	// broken one in the background) and every session idle.
	idle := func(step string) {
		t.Helper()
		testpoll.Until(t, step+": every connection back in the pool, every session idle", func() bool {
			states, waiting := lb.sessions(t)
			return lb.pool.Stat().AcquiredConns() == 0 && states["idle"] == total(states) && waiting == 0
		})
	}

	// The write batch fails.
	lb.w.SetCut(func(at string, b *pgx.Batch) {
		if at == "appended" {
			b.Queue(`SELECT 1 / 0`)
		}
	})
	if _, err := lb.w.Claim(lb.ctx, d.ID, time.Minute); err == nil {
		t.Fatal("claim with a failing write succeeded")
	}
	lb.w.SetCut(nil)
	idle("failed write")
	if lb.pool.Stat().TotalConns() == 0 {
		t.Error("the connection was closed, not rolled back")
	}

	// The command refuses after its read.
	c, err := lb.w.Claim(lb.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.w.Claim(lb.ctx, d.ID, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
		t.Fatalf("second claim: %v", err)
	}
	idle("refusal")

	// The command's context ends while it waits for the lock.
	release := lb.holdMessage(t, c.Message.ID)
	ctx, cancel := context.WithTimeout(lb.ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := lb.w.Complete(ctx, d.ID, c.Token, lifecycle.Delivered("200 OK")); err == nil {
		t.Fatal("complete past its deadline succeeded")
	}
	release()
	idle("deadline")

	if _, err := lb.w.Complete(lb.ctx, d.ID, c.Token, lifecycle.Delivered("200 OK")); err != nil {
		t.Fatal(err)
	}
	idle("complete")
	lb.noLostRacesAndAudit(t)
}

// TestCommandsOnAHeldMessageWaitForTheirBatch: while a batch holds a
// message, a command on another of its deliveries waits in the Writer, not
// on the row lock, and goes into a batch of its own once the first ends;
// a command on another message passes it.
func TestCommandsOnAHeldMessageWaitForTheirBatch(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "alpha", "beta")
	// Ingested by the Writer, which so knows the messages of their
	// deliveries.
	var m, other *projection.Message
	for _, p := range []**projection.Message{&m, &other} {
		var err error
		if *p, _, err = lb.w.Ingest(lb.ctx, newMessage()); err != nil {
			t.Fatal(err)
		}
	}
	sizes := lb.batchSizes()
	release := lb.holdMessage(t, m.ID)
	var wg sync.WaitGroup
	claim := func(id uuid.UUID) {
		wg.Go(func() {
			if _, err := lb.w.Claim(lb.ctx, id, time.Minute); err != nil {
				t.Errorf("claim %s: %v", id, err)
			}
		})
	}
	claim(m.Deliveries[0].ID)
	lb.untilWaiting(t, 1)
	claim(m.Deliveries[1].ID)
	lb.untilPending(t, 1)
	// A command on another message is written meanwhile.
	if _, err := lb.w.Claim(lb.ctx, other.Deliveries[0].ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, waiting := lb.sessions(t); waiting != 1 || lb.w.Pending() != 1 {
		t.Fatalf("%d sessions wait on a lock and %d commands for a batch, want 1 and 1", waiting, lb.w.Pending())
	}
	release()
	wg.Wait()
	if got := sizes(); !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("batch sizes %v, want [1 1 1]", got)
	}
	lb.noLostRacesAndAudit(t)
}

func total(states map[string]int) int {
	n := 0
	for _, c := range states {
		n += c
	}
	return n
}

// TestCommandsQueuedBehindABusyDatabaseShareABatch holds every batch a
// Writer may have open behind a lock, queues claims of 18 deliveries of 9
// messages, and releases the lock: the 18 are written as one batch, each
// claim is its own, and the journal and tables agree.
func TestCommandsQueuedBehindABusyDatabaseShareABatch(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "alpha", "beta")
	var deliveries []uuid.UUID
	for range 9 {
		for _, d := range lb.ingest(t).Deliveries {
			deliveries = append(deliveries, d.ID)
		}
	}
	release := lb.busy(t)
	sizes := lb.batchSizes()
	var (
		wg     sync.WaitGroup
		tokens sync.Map
	)
	for _, id := range deliveries {
		wg.Go(func() {
			c, err := lb.w.Claim(lb.ctx, id, time.Minute)
			if err != nil {
				t.Errorf("claim %s: %v", id, err)
				return
			}
			if c.Delivery.ID != id || c.Attempt != 1 || string(c.Payload) != "hello" {
				t.Errorf("claim of %s: %+v", id, c)
			}
			tokens.Store(id, c.Token)
		})
	}
	lb.untilPending(t, len(deliveries))
	release()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if got := sizes(); !slices.Equal(got, []int{18}) {
		t.Errorf("batch sizes %v, want [18]", got)
	}
	for _, id := range deliveries {
		token, _ := tokens.Load(id)
		if _, err := lb.w.Complete(lb.ctx, id, token.(uuid.UUID), lifecycle.Delivered("200 OK")); err != nil {
			t.Fatal(err)
		}
	}
	lb.noLostRacesAndAudit(t)
}

// TestIngestsQueuedTogetherKeepTheirIdempotency queues six ingests behind
// two busy batches, three of them with one idempotency key: the batch fails
// on the key and is written again one ingest at a time, so one of the three
// stores the message, the other two get it back, and the rest are stored.
func TestIngestsQueuedTogetherKeepTheirIdempotency(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	lb.targets(t, "alpha", "beta")
	release := lb.busy(t)
	var wg sync.WaitGroup
	type result struct {
		id      uuid.UUID
		created bool
	}
	results := make([]result, 6)
	for i := range results {
		wg.Go(func() {
			in := newMessage()
			if i < 3 {
				in.IdempotencyKey = "order-42"
			}
			m, created, err := lb.w.Ingest(lb.ctx, in)
			if err != nil {
				t.Errorf("ingest %d: %v", i, err)
				return
			}
			results[i] = result{m.ID, created}
		})
	}
	lb.untilPending(t, len(results))
	release()
	wg.Wait()
	created := 0
	for i, r := range results {
		if r.created {
			created++
		}
		if i < 3 && r.id != results[0].id {
			t.Errorf("ingest %d with the key got message %s, ingest 0 got %s", i, r.id, results[0].id)
		}
		if i >= 3 && !r.created {
			t.Errorf("ingest %d without a key was not stored", i)
		}
	}
	if created != 4 {
		t.Errorf("%d messages stored, want 4", created)
	}
	lb.audit(t)
}

// TestAWriterReadsWhatAnotherWrote: a Writer that holds a message as it
// wrote it reads it again once another Writer has moved it, and decides
// on what the other wrote.
func TestAWriterReadsWhatAnotherWrote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	m := b.ingest(t)
	d := m.Deliveries[0].ID
	if b.w.Written(m.ID) == nil {
		t.Fatal("the Writer holds nothing of the message it ingested")
	}
	other, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := other.Claim(b.ctx, d, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b.audit(t) // the other Writer's claim in flight
	if _, err := b.w.Claim(b.ctx, d, time.Minute); !errors.Is(err, commands.ErrNotClaimable) {
		t.Fatalf("a claim of what the other Writer claimed: %v", err)
	}
	after, err := b.w.Complete(b.ctx, d, c.Token, lifecycle.Delivered("200"))
	if err != nil || after.Status != lifecycle.StatusDelivered {
		t.Fatalf("the outcome of the other Writer's claim: %v, %v", after, err)
	}
	b.audit(t)
}

// TestABatchEndsAttemptsBeforeItClaims queues a claim and then an outcome
// of a target with max_concurrent 1 behind two busy batches, so that one
// batch writes both: targets_admit counts at commit, where the outcome
// has freed the one slot, and the journal records the outcome first, so
// the audit, which counts event by event, finds the limit kept.
func TestABatchEndsAttemptsBeforeItClaims(t *testing.T) {
	t.Parallel()
	lb := setupLock(t)
	if _, err := lb.w.CreateTarget(lb.ctx, lifecycle.Target{Name: "one", Kind: "http", Enabled: true, MaxConcurrent: 1, Config: sinkConfig}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.w.CreateRoute(lb.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "one"}, admin); err != nil {
		t.Fatal(err)
	}
	first, second := lb.ingest(t).Deliveries[0].ID, lb.ingest(t).Deliveries[0].ID
	c, err := lb.w.Claim(lb.ctx, first, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	release := lb.busy(t)
	sizes := lb.batchSizes()
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := lb.w.Claim(lb.ctx, second, time.Minute); err != nil {
			t.Errorf("claim %s: %v", second, err)
		}
	})
	lb.untilPending(t, 1)
	wg.Go(func() {
		if _, err := lb.w.Complete(lb.ctx, first, c.Token, lifecycle.Delivered("200 OK")); err != nil {
			t.Errorf("complete %s: %v", first, err)
		}
	})
	lb.untilPending(t, 2)
	release()
	wg.Wait()
	if got := sizes(); !slices.Equal(got, []int{2}) {
		t.Errorf("batch sizes %v, want [2]", got)
	}
	var kinds []string
	rows, err := lb.db.Query(lb.ctx, `SELECT kind FROM journal WHERE delivery_id = ANY($1) AND kind <> 'message.dispatched' ORDER BY position`,
		[]uuid.UUID{first, second})
	if err != nil {
		t.Fatal(err)
	}
	if kinds, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if want := []string{"delivery.claimed", "delivery.attempted", "delivery.claimed"}; !slices.Equal(kinds, want) {
		t.Errorf("journal %v, want %v", kinds, want)
	}
	lb.noLostRacesAndAudit(t)
}

// limitBehindItsBack gives the target alpha a max_concurrent of 1
// through another Writer, which b.w's configuration does not see.
func limitBehindItsBack(t *testing.T, b *bundle) {
	t.Helper()
	other, err := newWriter(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	limited := lifecycle.Target{Name: "alpha", Kind: "http", Enabled: true, MaxConcurrent: 1, Config: sinkConfig}
	if _, err := other.UpdateTarget(b.ctx, limited, admin); err != nil {
		t.Fatal(err)
	}
}

// TestAClaimOfLimitsItsConfigurationMissedIsDecidedAgain: a Writer whose
// configuration shows a target without limits takes the target's claim
// lock shared. Once another Writer has given the target a
// max_concurrent, targets_admit refuses that claim (WB001), and the
// Writer claims again on the configuration read anew, with the lock
// alone.
func TestAClaimOfLimitsItsConfigurationMissedIsDecidedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	d := b.ingest(t).Deliveries[0].ID
	limitBehindItsBack(t, b)
	lost := make(chan error, 10)
	b.w.SetLost(func(err error) { lost <- err })
	if _, err := b.w.Claim(b.ctx, d, time.Minute); err != nil {
		t.Fatal(err)
	}
	close(lost)
	var refusals []string
	for err := range lost {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Fatalf("lost race %v, want a refusal of targets_admit", err)
		}
		refusals = append(refusals, pgErr.Code)
	}
	if !slices.Equal(refusals, []string{schema.CodeTargetDisabled}) {
		t.Errorf("refusals %v, want [%s]", refusals, schema.CodeTargetDisabled)
	}
	b.audit(t)
}

// TestAChoiceOfLimitsItsConfigurationMissedIsDecidedAgain: a Writer whose
// configuration shows a target without limits chooses its due deliveries
// without reading them (projection.UnlimitedChoiceSQL). Once another
// Writer has given the target a max_concurrent, targets_admit refuses
// those claims, and the next choice, on the configuration read anew,
// claims no more than the limit lets through.
func TestAChoiceOfLimitsItsConfigurationMissedIsDecidedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	for range 3 {
		b.ingest(t)
	}
	limitBehindItsBack(t, b)
	claims, err := b.w.ClaimDue(b.ctx, "alpha", 3, time.Minute)
	if err != nil || len(claims) != 0 {
		t.Fatalf("claims on the configuration before the limit: %d, %v; want none", len(claims), err)
	}
	if claims, err = b.w.ClaimDue(b.ctx, "alpha", 3, time.Minute); err != nil || len(claims) != 1 {
		t.Fatalf("claims on the configuration read anew: %d, %v; want 1", len(claims), err)
	}
	b.audit(t)
}
