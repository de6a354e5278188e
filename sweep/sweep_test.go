package sweep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const admin = "operator:admin"

// quiet keeps the sweep's logs to warnings and errors.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// recorder is a Notifier that keeps the wake-ups it is given, each with the
// dispatch_count another session reads for the delivery at that moment: the
// woken count when the wake-up comes after the commit.
type recorder struct {
	db *pgxpool.Pool
	mu sync.Mutex
	// seen maps each delivery notified to the counts read, one a wake-up.
	seen map[uuid.UUID][]int
	errs []error
}

func (r *recorder) Notify(ws []commands.Wakeup) {
	for _, w := range ws {
		var n int
		err := r.db.QueryRow(context.Background(), `SELECT dispatch_count FROM deliveries WHERE id = $1`, w.DeliveryID).Scan(&n)
		r.mu.Lock()
		r.seen[w.DeliveryID] = append(r.seen[w.DeliveryID], n)
		if err != nil {
			r.errs = append(r.errs, err)
		}
		r.mu.Unlock()
	}
}

// take returns what was recorded since the last take, and forgets it.
func (r *recorder) take(t *testing.T) map[uuid.UUID][]int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		t.Errorf("notify: %v", err)
	}
	seen := r.seen
	r.seen, r.errs = map[uuid.UUID][]int{}, nil
	return seen
}

type bundle struct {
	ctx   context.Context
	db    *pgxpool.Pool
	clock *testclock.Clock
	w     *commands.Writer
	wake  *recorder
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), clock: testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))}
	b.db = dbtest.Pool(t)
	b.w, b.wake = b.writer(t, b.db)
	return b
}

// writer is a Writer on db with the bundle's clock and a recorder of its own.
func (b *bundle) writer(t *testing.T, db *pgxpool.Pool) (*commands.Writer, *recorder) {
	t.Helper()
	r := &recorder{db: db, seen: map[uuid.UUID][]int{}}
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now, Logger: quiet}, DB: db, Notifier: r})
	if err != nil {
		t.Fatal(err)
	}
	return w, r
}

// sweeper is a Sweeper of w with the clock; cfg sets the rest.
func (b *bundle) sweeper(t *testing.T, cfg sweep.Config) *sweep.Sweeper {
	t.Helper()
	if cfg.Writer == nil {
		cfg.Writer, cfg.DB = b.w, b.db
	}
	if cfg.Now == nil {
		cfg.Now = b.clock.Now
	}
	cfg.Logger = quiet
	s, err := sweep.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// targets creates the named targets and a route from source "erp" for any
// parties to each.
func (b *bundle) targets(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		target := lifecycle.Target{Name: name, Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}
		if _, err := b.w.CreateTarget(b.ctx, target, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *bundle) maxDispatches(t *testing.T, n int) {
	t.Helper()
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: n}}, admin); err != nil {
		t.Fatal(err)
	}
}

// ingest stores and dispatches a message; it returns its first delivery.
func (b *bundle) ingest(t *testing.T) projection.Delivery {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
		ContentType: "text/plain", Payload: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	return m.Deliveries[0]
}

func (b *bundle) claim(t *testing.T, d projection.Delivery, lease time.Duration) commands.Claim {
	t.Helper()
	c, err := b.w.Claim(b.ctx, d.ID, lease)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *bundle) complete(t *testing.T, c commands.Claim, o lifecycle.Outcome) {
	t.Helper()
	if _, err := b.w.Complete(b.ctx, c.Delivery.ID, c.Token, o); err != nil {
		t.Fatal(err)
	}
}

// delivery reads a delivery as stored.
func (b *bundle) delivery(t *testing.T, d projection.Delivery) projection.Delivery {
	t.Helper()
	m, err := projection.Load(b.ctx, b.db, d.MessageID)
	if err != nil {
		t.Fatal(err)
	}
	return *m.Delivery(d.ID)
}

// audit fails the test on any violation.
func (b *bundle) audit(t *testing.T) {
	t.Helper()
	dbtest.Audit(t, b.db)
}

// overdue counts the deliveries a sweep step would still take now.
func (b *bundle) overdue(t *testing.T) int {
	t.Helper()
	var n int
	err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM deliveries
		WHERE state IN ('queued', 'retrying', 'awaiting_ack') AND next_due <= $1
			OR state = 'delivering' AND lease_end <= $1`, b.clock.Now()).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPassDoesEachStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	b.maxDispatches(t, 2)
	s := b.sweeper(t, sweep.Config{})

	// At t0 every delivery is dispatched: woken once, due 10 s on.
	queued := b.ingest(t)
	stalls := b.ingest(t)
	reset := b.ingest(t)
	expires := b.ingest(t)
	retrying := b.ingest(t)
	awaiting := b.ingest(t)

	b.clock.Advance(10 * time.Second)
	// The second wake-up of stalls is its last (max_dispatches 2).
	for _, d := range []projection.Delivery{stalls, reset} {
		if kind, err := b.w.Wake(b.ctx, d.ID); err != nil || kind != journal.KindDeliveryWoken {
			t.Fatalf("wake: %q %v", kind, err)
		}
	}
	// reset has had as many wake-ups as stalls, but a claim starts the
	// count again.
	b.complete(t, b.claim(t, reset, time.Minute), lifecycle.Retry(b.clock.Now().Add(5*time.Second), "503"))
	b.complete(t, b.claim(t, retrying, time.Minute), lifecycle.Retry(b.clock.Now().Add(5*time.Second), "503"))
	b.claim(t, expires, time.Minute)
	b.complete(t, b.claim(t, awaiting, time.Minute), lifecycle.AwaitingAck("sent", b.clock.Now().Add(30*time.Second)))

	b.clock.Advance(time.Minute)
	notDue := b.ingest(t)
	b.wake.take(t)

	r, err := s.Pass(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The expired lease leaves its delivery retrying and due now, so the
	// same pass wakes it.
	if want := (sweep.Result{Expired: 1, Woken: 4, Stalled: 1, TimedOut: 1}); r != want {
		t.Errorf("result %+v, want %+v", r, want)
	}
	now := b.clock.Now()

	type expect struct {
		d     projection.Delivery
		state lifecycle.DeliveryState
		count int
		due   time.Time
		// The dispatch at ingest is a message event, not listed here.
		kinds []journal.Kind
	}
	const (
		woken     = journal.KindDeliveryWoken
		claimed   = journal.KindDeliveryClaimed
		attempted = journal.KindDeliveryAttempted
	)
	expects := []expect{
		{queued, lifecycle.StateQueued, 2, now.Add(30 * time.Second), []journal.Kind{woken}},
		{stalls, lifecycle.StateStalled, 2, time.Time{}, []journal.Kind{woken, journal.KindDeliveryStalled}},
		{reset, lifecycle.StateRetrying, 1, now.Add(10 * time.Second), []journal.Kind{woken, claimed, attempted, woken}},
		{retrying, lifecycle.StateRetrying, 1, now.Add(10 * time.Second), []journal.Kind{claimed, attempted, woken}},
		{expires, lifecycle.StateRetrying, 1, now.Add(10 * time.Second), []journal.Kind{claimed, journal.KindDeliveryLeaseExpired, woken}},
		{awaiting, lifecycle.StateFailed, 0, time.Time{}, []journal.Kind{claimed, attempted, journal.KindReceiptTimedOut}},
		{notDue, lifecycle.StateQueued, 1, now.Add(10 * time.Second), nil},
	}
	for _, w := range expects {
		got := b.delivery(t, w.d)
		if got.State != w.state || got.DispatchCount != w.count || !got.NextDue.Equal(w.due) {
			t.Errorf("delivery %s: %s, %d wake-ups, due %s; want %s, %d, %s",
				w.d.ID, got.State, got.DispatchCount, got.NextDue, w.state, w.count, w.due)
		}
		if kinds := dbtest.Kinds(t, b.db, w.d); !slices.Equal(kinds, w.kinds) {
			t.Errorf("delivery %s: events %v, want %v", w.d.ID, kinds, w.kinds)
		}
	}
	if got := b.delivery(t, stalls).LastError; got != "not claimed by alpha after 2 wake-ups" {
		t.Errorf("stalled: %q", got)
	}
	if got := b.delivery(t, awaiting).LastError; got != "no receipt within 30s" {
		t.Errorf("timed out: %q", got)
	}
	if got := b.delivery(t, expires).LastError; got != "attempt interrupted: lease expired" {
		t.Errorf("lease expired: %q", got)
	}

	// One wake-up per delivery woken, each published once its count is
	// committed.
	seen := b.wake.take(t)
	if len(seen) != r.Woken {
		t.Errorf("%d deliveries notified, want %d", len(seen), r.Woken)
	}
	for _, w := range expects {
		if len(w.kinds) == 0 || w.kinds[len(w.kinds)-1] != woken {
			continue
		}
		if got := seen[w.d.ID]; !slices.Equal(got, []int{w.count}) {
			t.Errorf("delivery %s: notified with the counts %v committed, want [%d]", w.d.ID, got, w.count)
		}
	}

	// Nothing is left to do at the same time.
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{}) {
		t.Errorf("second pass: %+v %v", r, err)
	}
	b.audit(t)
}

func TestPassFollowsTheBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	s := b.sweeper(t, sweep.Config{})
	d := b.ingest(t)
	dispatched := b.clock.Now()

	// Never claimed, with max_dispatches 5: woken at 10 s, 40 s, 2 min 40 s
	// and 12 min 40 s, stalled at 22 min 40 s.
	for n, at := range []time.Duration{10 * time.Second, 40 * time.Second, 160 * time.Second, 760 * time.Second} {
		b.clock.Advance(dispatched.Add(at).Sub(b.clock.Now()) - time.Microsecond)
		if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{}) {
			t.Fatalf("just before %s: %+v %v", at, r, err)
		}
		b.clock.Advance(time.Microsecond)
		if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{Woken: 1}) {
			t.Fatalf("at %s: %+v %v", at, r, err)
		}
		got := b.delivery(t, d)
		if count := n + 2; got.DispatchCount != count || !got.NextDue.Equal(b.clock.Now().Add(lifecycle.DispatchBackoff(count))) {
			t.Fatalf("at %s: %d wake-ups, due %s", at, got.DispatchCount, got.NextDue)
		}
	}
	b.clock.Advance(10 * time.Minute)
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{Stalled: 1}) {
		t.Fatalf("at 22 min 40 s: %+v %v", r, err)
	}
	if got := b.delivery(t, d); got.State != lifecycle.StateStalled || got.LastError != "not claimed by alpha after 5 wake-ups" {
		t.Errorf("%s %q", got.State, got.LastError)
	}
	b.audit(t)
}

func TestPassTakesEveryBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	s := b.sweeper(t, sweep.Config{Batch: 3, Pause: time.Millisecond})

	var ds []projection.Delivery
	for range 18 {
		ds = append(ds, b.ingest(t))
	}
	// 10 stay queued, 4 have a lease that runs out, 4 await a receipt.
	for _, d := range ds[10:14] {
		b.claim(t, d, time.Minute)
	}
	for _, d := range ds[14:] {
		b.complete(t, b.claim(t, d, time.Minute), lifecycle.AwaitingAck("sent", b.clock.Now().Add(time.Minute)))
	}
	b.clock.Advance(time.Minute)

	r, err := s.Pass(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (sweep.Result{Expired: 4, Woken: 14, TimedOut: 4}); r != want {
		t.Errorf("result %+v, want %+v", r, want)
	}
	if n := b.overdue(t); n != 0 {
		t.Errorf("%d deliveries still due after the pass", n)
	}
	b.audit(t)
}

// TestPassWakesAFewPerTarget: a pass wakes each target's most overdue
// deliveries, WakePerTarget of them, and leaves the rest of a backlog to
// the workers' catch-up and to later passes.
func TestPassWakesAFewPerTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	s := b.sweeper(t, sweep.Config{WakePerTarget: 3})
	var first []uuid.UUID
	for i := range 8 {
		d := b.ingest(t) // to alpha and beta
		if i < 3 {
			first = append(first, d.MessageID)
		}
		b.clock.Advance(time.Millisecond)
	}
	b.clock.Advance(time.Minute)
	r, err := s.Pass(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Woken != 6 {
		t.Errorf("woken %d, want 3 of each target", r.Woken)
	}
	if n := b.overdue(t); n != 10 {
		t.Errorf("%d still due, want 10", n)
	}
	rows, err := b.db.Query(b.ctx, `SELECT DISTINCT d.message_id FROM deliveries d JOIN journal j ON j.delivery_id = d.id
		WHERE j.kind = $1`, journal.KindDeliveryWoken)
	if err != nil {
		t.Fatal(err)
	}
	woken, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || !sameSet(woken, first) {
		t.Errorf("woke the deliveries of %v, want the oldest %v (%v)", woken, first, err)
	}
	b.audit(t)
}

func sameSet(a, b []uuid.UUID) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(id uuid.UUID) bool { return !slices.Contains(b, id) })
}

func TestTwoSweepersWakeEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := []string{"alpha", "beta", "gamma"}
	b.targets(t, names...)
	for range 100 {
		b.ingest(t)
	}
	b.clock.Advance(10 * time.Second)

	// Two processes: a pool, a Writer and a Sweeper each.
	other, err := pgxpool.New(b.ctx, b.db.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	w2, wake2 := b.writer(t, other)
	b.wake.take(t)
	sweepers := []*sweep.Sweeper{
		b.sweeper(t, sweep.Config{Batch: 50, Pause: time.Millisecond}),
		b.sweeper(t, sweep.Config{Writer: w2, DB: other, Batch: 50, Pause: time.Millisecond}),
	}

	results := make([]sweep.Result, len(sweepers))
	errs := make([]error, len(sweepers))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range sweepers {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Pass(b.ctx)
		})
	}
	close(start)
	wg.Wait()
	woken := 0
	for i := range sweepers {
		if errs[i] != nil {
			t.Fatalf("sweeper %d: %v", i, errs[i])
		}
		if r := results[i]; r.Expired+r.Stalled+r.TimedOut != 0 {
			t.Errorf("sweeper %d: %+v", i, r)
		}
		woken += results[i].Woken
	}
	t.Logf("woken: %d and %d", results[0].Woken, results[1].Woken)
	if woken != 300 {
		t.Errorf("%d woken in all, want 300", woken)
	}

	rows, err := b.db.Query(b.ctx, `SELECT d.id, count(j.position) FROM deliveries d
		LEFT JOIN journal j ON j.delivery_id = d.id AND j.kind = $1 GROUP BY d.id`, journal.KindDeliveryWoken)
	if err != nil {
		t.Fatal(err)
	}
	var (
		id uuid.UUID
		n  int
	)
	deliveries := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		deliveries++
		if n != 1 {
			t.Errorf("delivery %s woken %d times", id, n)
		}
		return nil
	})
	if err != nil || deliveries != 300 {
		t.Fatalf("%d deliveries, %v", deliveries, err)
	}

	// Each wake-up is published once, by the Writer that recorded it.
	seen := b.wake.take(t)
	for id, counts := range wake2.take(t) {
		seen[id] = append(seen[id], counts...)
	}
	if len(seen) != 300 {
		t.Errorf("%d deliveries notified, want 300", len(seen))
	}
	for id, counts := range seen {
		if !slices.Equal(counts, []int{2}) {
			t.Errorf("delivery %s notified with counts %v", id, counts)
		}
	}
	if n := b.overdue(t); n != 0 {
		t.Errorf("%d deliveries still due", n)
	}
	b.audit(t)
}

// gauges reads the registry's gauges, by name and, for a labelled one,
// name{label=value}.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetGauge() == nil {
				continue
			}
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			out[name] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	b.maxDispatches(t, 1)
	// A target with no delivery has its series, at zero.
	idle := lifecycle.Target{Name: "idle", Kind: "http", Enabled: true, Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}
	if _, err := b.w.CreateTarget(b.ctx, idle, admin); err != nil {
		t.Fatal(err)
	}

	stalls := b.ingest(t)
	b.clock.Advance(10 * time.Second)
	b.claim(t, b.ingest(t), time.Hour)
	b.complete(t, b.claim(t, b.ingest(t), time.Minute), lifecycle.Retry(b.clock.Now().Add(time.Hour), "503"))
	b.complete(t, b.claim(t, b.ingest(t), time.Minute), lifecycle.AwaitingAck("sent", b.clock.Now().Add(time.Hour)))
	b.complete(t, b.claim(t, b.ingest(t), time.Minute), lifecycle.Delivered("200"))
	b.complete(t, b.claim(t, b.ingest(t), time.Minute), lifecycle.Failed("400"))
	b.complete(t, b.claim(t, b.ingest(t), time.Minute), lifecycle.Delivered("200"))
	queued := b.ingest(t)

	reg := prometheus.NewRegistry()
	s := b.sweeper(t, sweep.Config{Registerer: reg})
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{Stalled: 1}) {
		t.Fatalf("pass: %+v %v", r, err)
	}
	var position float64
	if err := b.db.QueryRow(b.ctx, `SELECT max(position) FROM journal`).Scan(&position); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"waybill_deliveries_due":                   0,
		"waybill_oldest_due_seconds{target=alpha}": 0,
		"waybill_oldest_due_seconds{target=idle}":  0,
		"waybill_journal_position":                 position,
	}
	// Five outcomes are too few to open the default breaker.
	for _, target := range []string{"alpha", "idle"} {
		for _, state := range []string{"closed", "open", "half_open", "throttled", "disabled"} {
			want["waybill_target_health{state="+state+"}{target="+target+"}"] = 0
		}
		want["waybill_target_health{state=closed}{target="+target+"}"] = 1
		want["waybill_target_held{target="+target+"}"] = 0
	}
	alpha := map[lifecycle.DeliveryState]float64{lifecycle.StateQueued: 1, lifecycle.StateDelivering: 1, lifecycle.StateRetrying: 1,
		lifecycle.StateAwaitingAck: 1, lifecycle.StateDelivered: 2, lifecycle.StateFailed: 1, lifecycle.StateStalled: 1}
	for _, state := range lifecycle.CountedStates {
		want["waybill_deliveries{state="+string(state)+"}{target=alpha}"] = alpha[state]
		want["waybill_deliveries{state="+string(state)+"}{target=idle}"] = 0
	}
	got := gauges(t, reg)
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("gauges %v", got)
	}
	if d := b.delivery(t, stalls); d.State != lifecycle.StateStalled {
		t.Errorf("stalls: %s", d.State)
	}

	// Deliveries that fall due while a pass runs are left for the next;
	// the gauges show them. A Sweeper a minute ahead of its Writer finds
	// queued due, which the Writer does not wake yet.
	reg = prometheus.NewRegistry()
	ahead := b.sweeper(t, sweep.Config{Base: service.Base{Now: func() time.Time { return b.clock.Now().Add(time.Minute) }}, Registerer: reg})
	if r, err := ahead.Pass(b.ctx); err != nil || r != (sweep.Result{}) {
		t.Fatalf("pass ahead: %+v %v", r, err)
	}
	got = gauges(t, reg)
	if got["waybill_deliveries_due"] != 1 || got["waybill_oldest_due_seconds{target=alpha}"] != 50 {
		t.Errorf("due %v, oldest %v s; want 1 and 50 s (queued due %s)",
			got["waybill_deliveries_due"], got["waybill_oldest_due_seconds{target=alpha}"], queued.NextDue)
	}

	// A deleted target's series go with it.
	if err := b.w.DeleteTarget(b.ctx, "idle", admin); err != nil {
		t.Fatal(err)
	}
	if _, err := ahead.Pass(b.ctx); err != nil {
		t.Fatal(err)
	}
	for name := range gauges(t, reg) {
		if strings.Contains(name, "{target=idle}") {
			t.Errorf("%s after the target's deletion", name)
		}
	}
	b.audit(t)
}

// TestGaugesSetWhenAStepFails: a command of a step that keeps failing
// fails the pass, and the gauges are set all the same.
func TestGaugesSetWhenAStepFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	held := b.claim(t, b.ingest(t), time.Minute)
	b.ingest(t)
	// An event the projections do not know of takes the version the lease's
	// expiry would append at: every try of ExpireLease fails.
	if _, err := b.db.Exec(b.ctx, `INSERT INTO journal (recorded_at, stream, version, kind, actor, payload)
		SELECT now(), stream, max(version) + 1, 'message.accepted', 'source:erp', '{}' FROM journal WHERE stream = $1 GROUP BY stream`,
		held.Delivery.MessageID.String()); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * time.Minute)
	reg := prometheus.NewRegistry()
	if _, err := b.sweeper(t, sweep.Config{Registerer: reg}).Pass(b.ctx); err == nil {
		t.Fatal("a pass whose lease expiry cannot be written succeeded")
	}
	got := gauges(t, reg)
	for name, want := range map[string]float64{"waybill_deliveries{state=queued}{target=alpha}": 1,
		"waybill_deliveries{state=delivering}{target=alpha}": 1, "waybill_target_health{state=closed}{target=alpha}": 1} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")

	never := b.sweeper(t, sweep.Config{})
	never.Stop(b.ctx)
	never.Stop(b.ctx)

	d := b.ingest(t)
	b.clock.Advance(10 * time.Second)
	s := b.sweeper(t, sweep.Config{Interval: time.Hour})
	if err := s.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	// The first pass ran before Start returned.
	if got := b.delivery(t, d); got.DispatchCount != 2 {
		t.Errorf("after Start: %d wake-ups", got.DispatchCount)
	}
	s.Stop(b.ctx)
	s.Stop(b.ctx)

	// A first pass that fails is Start's error, and Stop is still safe.
	canceled, cancel := context.WithCancel(b.ctx)
	cancel()
	failing := b.sweeper(t, sweep.Config{})
	if err := failing.Start(canceled); err == nil {
		t.Error("Start on a canceled context succeeded")
	}
	failing.Stop(b.ctx)
	failing.Stop(b.ctx)
	b.audit(t)
}

// TestPassQueuesScheduledWhenDue: a pass leaves a scheduled delivery
// alone until its time, then queues and wakes it, and the retry budget
// (max_age) counts from then.
func TestPassQueuesScheduledWhenDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	delay := lifecycle.Duration(time.Hour)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
		ContentType: "text/plain", Payload: []byte("later"), Delay: &delay})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Deliveries[0]
	s := b.sweeper(t, sweep.Config{})
	b.clock.Advance(59 * time.Minute)
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{}) {
		t.Fatalf("pass before its time: %+v %v", r, err)
	}
	if got := b.delivery(t, d); got.State != lifecycle.StateScheduled {
		t.Fatalf("before its time: %s", got.State)
	}
	b.clock.Advance(time.Minute)
	if r, err := s.Pass(b.ctx); err != nil || r != (sweep.Result{Due: 1}) {
		t.Fatalf("pass at its time: %+v %v", r, err)
	}
	got := b.delivery(t, d)
	if got.State != lifecycle.StateQueued || got.DispatchCount != 1 || !got.RedeliveredAt.Equal(b.clock.Now()) {
		t.Fatalf("at its time: %s woken %d budget from %v", got.State, got.DispatchCount, got.RedeliveredAt)
	}
	if seen := b.wake.take(t); len(seen[d.ID]) != 1 {
		t.Fatalf("wake-ups %v, want one of %s", seen, d.ID)
	}
	b.audit(t)
}
