package bulk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/bulk"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const admin = "operator:admin"

var quiet = slog.New(slog.DiscardHandler)

type bundle struct {
	ctx   context.Context
	db    *pgxpool.Pool
	clock *testclock.Clock
	w     *commands.Writer
	r     *bulk.Runner
	reg   *prometheus.Registry
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), db: dbtest.Pool(t), clock: testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)),
		reg: prometheus.NewRegistry()}
	b.w, b.r = b.process(t, b.db, b.reg)
	return b
}

// process is a Writer and a Runner of one process on db, on the test's
// clock.
func (b *bundle) process(t *testing.T, db *pgxpool.Pool, reg prometheus.Registerer) (*commands.Writer, *bulk.Runner) {
	t.Helper()
	base := service.Base{Now: b.clock.Now, Logger: quiet}
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	r, err := bulk.New(bulk.Config{Base: base, Writer: w, DB: db, Registerer: reg, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return w, r
}

// targets creates http targets and a route from source erp to each.
func (b *bundle) targets(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		// No health: the tests fail many attempts, which the operations
		// then act on, not a breaker.
		if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true,
			Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`), Health: &lifecycle.Health{}}, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, admin); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *bundle) ingest(t *testing.T) *projection.Message {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Millisecond)
	return m
}

// settle records an attempt of the message's delivery to target with the
// outcome, as its worker would.
func (b *bundle) settle(t *testing.T, m *projection.Message, target string, o lifecycle.Outcome) {
	t.Helper()
	for _, d := range m.Deliveries {
		if d.Target == target && d.Generation == m.Generation {
			c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.w.Complete(b.ctx, d.ID, c.Token, o); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("message %s has no delivery to %s", m.ID, target)
}

func (b *bundle) create(t *testing.T, spec commands.OperationSpec) *projection.Operation {
	t.Helper()
	o, err := b.w.CreateOperation(b.ctx, spec, "alice")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// run steps the runner until no operation runs, and returns o as it
// ended.
func (b *bundle) run(t *testing.T, r *bulk.Runner, o *projection.Operation) *projection.Operation {
	t.Helper()
	for range 10_000 {
		res, err := r.Step(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Operation == uuid.Nil {
			break
		}
		b.clock.Advance(100 * time.Millisecond)
	}
	got, err := projection.LoadOperation(b.ctx, b.db, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// acted counts, per message, the journal's events that carry the operation.
func (b *bundle) acted(t *testing.T, op uuid.UUID) map[uuid.UUID]int {
	t.Helper()
	rows, err := b.db.Query(b.ctx, `SELECT stream FROM journal WHERE payload->>'operation' = $1`, op.String())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]int{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out[uuid.MustParse(s)]++
	}
	return out
}

// taken reads waybill_operation_messages_total{result} from reg.
func taken(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "waybill_operation_messages_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no waybill_operation_messages_total{result=%q}", result)
	return 0
}

func load(t *testing.T, b *bundle, id uuid.UUID) *projection.Message {
	t.Helper()
	m, err := projection.Load(b.ctx, b.db, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func states(m *projection.Message) string {
	var out []string
	for _, d := range m.Deliveries {
		out = append(out, fmt.Sprintf("%d:%s:%s", d.Generation, d.Target, d.State))
	}
	return strings.Join(out, " ")
}

// TestRedeliverActsOnFailedAndStalledAndRefusesTheRest: a redeliver
// operation queues again every failed delivery of the current generation
// (to the filter's target only, when it names one), refuses a message with
// none, with the reason, and counts both; the actions carry the operation
// and the audit, which checks them against the operation's batches, is
// clean.
func TestRedeliverActsOnFailedAndStalledAndRefusesTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha", "beta")
	bothFailed := b.ingest(t)
	b.settle(t, bothFailed, "alpha", lifecycle.Failed("503"))
	b.settle(t, bothFailed, "beta", lifecycle.Failed("503"))
	oneFailed := b.ingest(t)
	b.settle(t, oneFailed, "alpha", lifecycle.Delivered("200"))
	b.settle(t, oneFailed, "beta", lifecycle.Failed("503"))
	inFlight := b.ingest(t)

	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionRedeliver, Reason: "beta is back",
		Filter: lifecycle.OperationFilter{Source: "erp"}})
	if o.Matched != 3 || o.State != lifecycle.OperationRunning || o.Listed != 3 {
		t.Fatalf("created %+v", o)
	}
	late := b.ingest(t) // after the operation's snapshot: not among its messages
	b.settle(t, late, "alpha", lifecycle.Failed("503"))

	got := b.run(t, b.r, o)
	if got.State != lifecycle.OperationDone || got.Done != 2 || got.Refused != 1 || got.FinishedAt.IsZero() {
		t.Fatalf("ended %+v", got)
	}
	if s := states(load(t, b, bothFailed.ID)); s != "1:alpha:queued 1:beta:queued" {
		t.Errorf("both failed: %s", s)
	}
	if s := states(load(t, b, oneFailed.ID)); s != "1:alpha:delivered 1:beta:queued" {
		t.Errorf("one failed: %s", s)
	}
	if s := states(load(t, b, late.ID)); s != "1:alpha:failed 1:beta:queued" {
		t.Errorf("the message that came later was touched: %s", s)
	}
	acted := b.acted(t, o.ID)
	if len(acted) != 2 || acted[bothFailed.ID] != 2 || acted[oneFailed.ID] != 1 {
		t.Errorf("events carrying the operation, by message: %v", acted)
	}
	refusals, err := projection.Refusals(b.ctx, b.db, o.ID, projection.RefusalAt{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(refusals) != 1 || refusals[0].MessageID != inFlight.ID ||
		!strings.Contains(refusals[0].Reason, "no delivery of generation 1 is failed or stalled (its deliveries: alpha queued, beta queued)") {
		t.Errorf("refusals %+v", refusals)
	}
	dbtest.Audit(t, b.db)

	// With a target, only the deliveries to it.
	b.settle(t, load(t, b, bothFailed.ID), "alpha", lifecycle.Failed("503"))
	b.settle(t, load(t, b, bothFailed.ID), "beta", lifecycle.Failed("503"))
	o = b.create(t, commands.OperationSpec{Action: lifecycle.ActionRedeliver,
		Filter: lifecycle.OperationFilter{Status: []lifecycle.MessageStatus{lifecycle.StatusError}, Target: "beta"}})
	if o.Matched != 1 { // late is in progress: its delivery to beta is queued
		t.Fatalf("matched %d", o.Matched)
	}
	if got := b.run(t, b.r, o); got.Done != 1 || got.Refused != 0 {
		t.Fatalf("ended %+v", got)
	}
	if s := states(load(t, b, bothFailed.ID)); s != "1:alpha:failed 1:beta:queued" {
		t.Errorf("redeliver to beta: %s", s)
	}
	dbtest.Audit(t, b.db)
}

// TestResendReplayAndSkip: resend and replay act on whole messages and
// refuse one still in hand with NOT_RESENDABLE's reason; skip settles
// what may be skipped; each message's action carries the operation once.
func TestResendReplayAndSkip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	settled := b.ingest(t)
	b.settle(t, settled, "alpha", lifecycle.Failed("503"))
	inHand := b.ingest(t)

	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionResend, Reason: "partner fixed it",
		Filter: lifecycle.OperationFilter{Source: "erp"}})
	if got := b.run(t, b.r, o); got.Done != 1 || got.Refused != 1 {
		t.Fatalf("resend ended %+v", got)
	}
	m := load(t, b, settled.ID)
	if m.Generation != 2 || states(m) != "1:alpha:superseded 2:alpha:queued" {
		t.Errorf("resent: generation %d, %s", m.Generation, states(m))
	}
	refusals, err := projection.Refusals(b.ctx, b.db, o.ID, projection.RefusalAt{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(refusals) != 1 || refusals[0].MessageID != inHand.ID || !strings.Contains(refusals[0].Reason, "message not resendable") {
		t.Errorf("refusals %+v", refusals)
	}

	// Replay to the routes of now: a second target joins.
	b.targets(t, "beta")
	b.settle(t, load(t, b, settled.ID), "alpha", lifecycle.Delivered("200"))
	o = b.create(t, commands.OperationSpec{Action: lifecycle.ActionReplay,
		Filter: lifecycle.OperationFilter{Status: []lifecycle.MessageStatus{lifecycle.StatusDelivered}}})
	if got := b.run(t, b.r, o); got.Done != 1 || got.Refused != 0 {
		t.Fatalf("replay ended %+v", got)
	}
	if s := states(load(t, b, settled.ID)); s != "1:alpha:superseded 2:alpha:delivered 3:alpha:queued 3:beta:queued" {
		t.Errorf("replayed: %s", s)
	}

	// Skip what is in hand.
	o = b.create(t, commands.OperationSpec{Action: lifecycle.ActionSkip, Reason: "sent by hand",
		Filter: lifecycle.OperationFilter{Source: "erp", Target: "beta"}})
	if got := b.run(t, b.r, o); got.Done != 1 || got.Refused != 0 || got.Matched != 1 {
		t.Fatalf("skip ended %+v", got)
	}
	if s := states(load(t, b, settled.ID)); s != "1:alpha:superseded 2:alpha:delivered 3:alpha:queued 3:beta:skipped" {
		t.Errorf("skipped: %s", s)
	}
	for id, n := range b.acted(t, o.ID) {
		if n != 1 || id != settled.ID {
			t.Errorf("message %s: %d events carry the skip", id, n)
		}
	}
	dbtest.Audit(t, b.db)
}

// TestResumeNeverActsTwice: a runner that stops after a batch leaves the
// operation where its journal says; another process's runner goes on from
// there. A batch sent again on the operation as it was read (its answer
// lost, or a second runner racing) is refused as moved and writes nothing.
func TestResumeNeverActsTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 5},
		Operations: lifecycle.OperationSettings{Rate: 8}}, admin); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for range 7 {
		m := b.ingest(t)
		b.settle(t, m, "alpha", lifecycle.Failed("503"))
		ids = append(ids, m.ID)
	}
	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionResend, Filter: lifecycle.OperationFilter{Source: "erp"}})
	res, err := b.r.Step(b.ctx)
	if err != nil || res.Taken != bulk.BatchSize(8) || res.Done != 2 {
		t.Fatalf("first step %+v, %v", res, err)
	}

	// The batch again, on the operation as it was read before it.
	batch, err := projection.LoadMatched(b.ctx, b.db, o, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Operate(b.ctx, o, batch); !errors.Is(err, commands.ErrOperationMoved) {
		t.Fatalf("the batch again: %v, want ErrOperationMoved", err)
	}

	// Another process takes over.
	_, r2 := b.process(t, b.db, nil)
	got := b.run(t, r2, o)
	if got.State != lifecycle.OperationDone || got.Done != 7 {
		t.Fatalf("ended %+v", got)
	}
	acted := b.acted(t, o.ID)
	for _, id := range ids {
		if acted[id] != 1 {
			t.Errorf("message %s: %d events carry the operation", id, acted[id])
		}
	}
	dbtest.Audit(t, b.db)
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 || r.Operations != 1 {
		t.Fatalf("rebuild: %+v %v", r, err)
	}
	after, err := projection.LoadOperation(b.ctx, b.db, o.ID)
	if err != nil || !reflect.DeepEqual(after, got) {
		t.Fatalf("rebuilt %+v, want %+v (%v)", after, got, err)
	}
}

// TestCancelStopsBeforeTheNextBatch: a cancelled operation takes no batch
// more; cancelling one that ended is ErrNotCancellable.
func TestCancelStopsBeforeTheNextBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 5},
		Operations: lifecycle.OperationSettings{Rate: 4}}, admin); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.ingest(t)
	}
	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}})
	if res, err := b.r.Step(b.ctx); err != nil || res.Taken != 1 {
		t.Fatalf("step %+v %v", res, err)
	}
	c, err := b.w.CancelOperation(b.ctx, o.ID, "alice", "wrong filter")
	if err != nil || c.State != lifecycle.OperationCancelled || c.Done != 1 || c.FinishedAt.IsZero() {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if res, err := b.r.Step(b.ctx); err != nil || res.Operation != uuid.Nil {
		t.Fatalf("a step after the cancel: %+v %v", res, err)
	}
	_, err = b.w.CancelOperation(b.ctx, o.ID, "alice", "")
	var se *commands.StateError
	if !errors.As(err, &se) || !errors.Is(err, commands.ErrNotCancellable) || se.State != "cancelled" {
		t.Fatalf("cancel again: %v", err)
	}
	if _, err := b.w.CancelOperation(b.ctx, uuid.New(), "alice", ""); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("cancel of none: %v", err)
	}
	if n := len(b.acted(t, o.ID)); n != 1 {
		t.Errorf("%d messages acted on", n)
	}
	dbtest.Audit(t, b.db)
}

// TestFailsOnWhatCannotGoOn: a batch that fails for a reason that does not
// pass (here a trigger refuses the operation's progress) ends the operation
// failed, with the reason, and nothing of the batch is written; one that
// can pass (the database away) is retried and loses nothing.
func TestFailsOnWhatCannotGoOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	m := b.ingest(t)
	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}})
	if _, err := b.db.Exec(b.ctx, `CREATE FUNCTION refuse_progress() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.kind = 'operation.progressed' THEN RAISE EXCEPTION 'no progress here'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_progress BEFORE INSERT ON journal FOR EACH ROW EXECUTE FUNCTION refuse_progress()`); err != nil {
		t.Fatal(err)
	}
	got := b.run(t, b.r, o)
	if got.State != lifecycle.OperationFailed || !strings.Contains(got.Error, "no progress here") || got.Done != 0 {
		t.Fatalf("ended %+v", got)
	}
	if s := states(load(t, b, m.ID)); s != "1:alpha:queued" {
		t.Errorf("the failed batch wrote: %s", s)
	}
	dbtest.Audit(t, b.db)
}

// TestOutageLosesNothing runs the runner's loop on a pool through a proxy
// that cuts every connection mid-run: the batches that fail are tried
// again after a back-off, and the operation ends with every message acted
// on once.
func TestOutageLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	if err := b.w.SetSettings(b.ctx, lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 5},
		Operations: lifecycle.OperationSettings{Rate: 40}}, admin); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for range 60 {
		ids = append(ids, b.ingest(t).ID)
	}
	proxy := dbtest.NewProxy(t, b.db)
	reg := prometheus.NewRegistry()
	_, r := b.process(t, proxy.Pool(t), reg)
	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}})
	if err := r.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	progress := func() *projection.Operation {
		got, err := projection.LoadOperation(b.ctx, b.db, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	testpoll.Until(t, "ten messages taken", func() bool { return progress().Next() >= 10 })
	proxy.Cut()
	testpoll.Until(t, "the runner to try again", func() bool { return proxy.Refused() >= 2 })
	proxy.Restore()
	testpoll.Until(t, "the operation to end", func() bool { return progress().State != lifecycle.OperationRunning })
	if got := progress(); got.State != lifecycle.OperationDone || got.Done != len(ids) {
		t.Fatalf("ended %+v", got)
	}
	acted := b.acted(t, o.ID)
	for _, id := range ids {
		if acted[id] != 1 {
			t.Errorf("message %s: %d events carry the operation", id, acted[id])
		}
	}
	// The cut may fall between a batch's commit and its reply: the runner
	// then cannot count that batch, though the operation does.
	if n := taken(t, reg, "done"); n > float64(len(ids)) || n < float64(len(ids)-bulk.BatchSize(40)) {
		t.Errorf("waybill_operation_messages_total{result=done} %v, want %d less at most one batch", n, len(ids))
	}
	dbtest.Audit(t, b.db)
}

// TestOneRunnerAtATime: of two runners on one database, one holds the lock
// and takes every batch; the other takes none.
func TestOneRunnerAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	for range 30 {
		b.ingest(t)
	}
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var runners []*bulk.Runner
	for _, reg := range regs {
		_, r := b.process(t, b.db, reg)
		if err := r.Start(b.ctx); err != nil {
			t.Fatal(err)
		}
		defer r.Stop(context.Background())
		runners = append(runners, r)
	}
	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}})
	runners[0].Wake()
	runners[1].Wake()
	testpoll.Until(t, "the operation done", func() bool {
		got, err := projection.LoadOperation(b.ctx, b.db, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State == lifecycle.OperationDone
	})
	var counts []float64
	for _, reg := range regs {
		counts = append(counts, taken(t, reg, "done"))
	}
	if !(counts[0] == 30 && counts[1] == 0 || counts[0] == 0 && counts[1] == 30) {
		t.Errorf("messages taken by each runner: %v", counts)
	}
	dbtest.Audit(t, b.db)
}

// TestAuditFindsActsOutsideTheBatches: an action that carries an
// operation outside the batch that counts its message done (as a second
// run would make), or on a message the operation does not count done, is
// a violation.
func TestAuditFindsActsOutsideTheBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	m := b.ingest(t)
	b.settle(t, m, "alpha", lifecycle.Failed("503"))
	o := b.create(t, commands.OperationSpec{Action: lifecycle.ActionRedeliver, Filter: lifecycle.OperationFilter{Source: "erp"}})
	if got := b.run(t, b.r, o); got.Done != 1 {
		t.Fatalf("ended %+v", got)
	}
	dbtest.Audit(t, b.db)
	b.settle(t, load(t, b, m.ID), "alpha", lifecycle.Failed("503"))
	other := b.ingest(t)
	b.settle(t, other, "alpha", lifecycle.Failed("503"))
	for _, x := range []*projection.Message{m, other} {
		if _, err := b.w.Redeliver(b.ctx, x.ID, x.Deliveries[0].ID, commands.Action{Operator: "alice", Operation: o.ID}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := projection.Audit(b.ctx, b.db, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, v := range r.Violations {
		found = append(found, v.String())
	}
	all := strings.Join(found, "\n")
	if len(found) != 2 || !strings.Contains(all, fmt.Sprintf("operation %s: message %s: position", o.ID, m.ID)) ||
		!strings.Contains(all, "acted on outside the batch that counts it done") ||
		!strings.Contains(all, fmt.Sprintf("operation %s: message %s: acted on by the operation, which does not count it done", o.ID, other.ID)) {
		t.Errorf("violations:\n%s", all)
	}
}

// TestDryRunAgreesWithTheRun: for each action, the dry run
// (Writer.PreviewOperation) counts what the run then does: the messages
// acted on, and those refused, by class; and it writes nothing. The
// messages fill more than one page of the dry run.
func TestDryRunAgreesWithTheRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		action lifecycle.OperationAction
		filter lifecycle.OperationFilter
	}{
		{"redeliver", lifecycle.ActionRedeliver, lifecycle.OperationFilter{Source: "erp"}},
		{"redeliver to beta", lifecycle.ActionRedeliver, lifecycle.OperationFilter{Source: "erp", Target: "beta"}},
		{"redeliver delivered", lifecycle.ActionRedeliver,
			lifecycle.OperationFilter{Status: []lifecycle.MessageStatus{lifecycle.StatusDelivered}}},
		{"skip", lifecycle.ActionSkip, lifecycle.OperationFilter{Source: "erp"}},
		{"resend", lifecycle.ActionResend, lifecycle.OperationFilter{Source: "erp"}},
		{"replay", lifecycle.ActionReplay, lifecycle.OperationFilter{Source: "erp"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.targets(t, "alpha", "beta")
			const rounds = 21 // 5 messages a round: more than a page of 100
			for range rounds {
				m := b.ingest(t)
				b.settle(t, m, "alpha", lifecycle.Failed("503"))
				b.settle(t, m, "beta", lifecycle.Failed("503"))
				m = b.ingest(t)
				b.settle(t, m, "alpha", lifecycle.Delivered("200"))
				b.settle(t, m, "beta", lifecycle.Failed("503"))
				m = b.ingest(t)
				b.settle(t, m, "alpha", lifecycle.Delivered("200"))
				b.settle(t, m, "beta", lifecycle.Delivered("200"))
				m = b.ingest(t)
				if _, err := b.w.Skip(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "bob"}); err != nil {
					t.Fatal(err)
				}
				b.ingest(t) // in hand
			}
			spec := commands.OperationSpec{Action: tc.action, Filter: tc.filter, Reason: "dry"}
			before := journalLength(t, b)
			pv, err := b.w.PreviewOperation(b.ctx, spec, "alice", 5)
			if err != nil {
				t.Fatal(err)
			}
			if n := journalLength(t, b); n != before {
				t.Fatalf("the dry run wrote %d events", n-before)
			}
			o := b.run(t, b.r, b.create(t, spec))
			refused := 0
			for _, c := range pv.Refused {
				refused += c.Count
			}
			if pv.Matched != o.Matched || pv.Decided != o.Matched || pv.Done != o.Done || refused != o.Refused || len(pv.Sample) != min(5, o.Matched) {
				t.Fatalf("dry run: matched %d, done %d, refused %d, sample %d; the run: matched %d, done %d, refused %d",
					pv.Matched, pv.Done, refused, len(pv.Sample), o.Matched, o.Done, o.Refused)
			}
			if tc.name == "redeliver delivered" && (pv.Done != 0 || pv.Matched != rounds) {
				t.Errorf("redeliver of delivered messages: dry run says %d of %d done", pv.Done, pv.Matched)
			}
			// Each class counts the run's refusals of its sentinel.
			reasons, err := projection.Refusals(b.ctx, b.db, o.ID, projection.RefusalAt{}, o.Refused+1)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range pv.Refused {
				var se *commands.StateError
				if !errors.As(c.Err, &se) {
					t.Fatalf("class %v is not a refusal of the message's state", c.Err)
				}
				n := 0
				for _, r := range reasons {
					if strings.HasPrefix(r.Reason, se.Err.Error()+": ") {
						n++
					}
				}
				if n != c.Count || !strings.HasPrefix(c.Reason, se.Err.Error()+": ") {
					t.Errorf("class %v (%q): dry run %d, the run %d", se.Err, c.Reason, c.Count, n)
				}
			}
		})
	}
}

func journalLength(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM journal`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDryRunAgreesWithTheRunOnLanes: on a fifo target, where an action
// moves lanes (a failed head redelivered in place, a resend to the back),
// the dry run counts what the run does.
func TestDryRunAgreesWithTheRunOnLanes(t *testing.T) {
	t.Parallel()
	for _, action := range lifecycle.OperationActions {
		t.Run(string(action), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "orders", Kind: "http", Enabled: true,
				Config:   json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
				Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO, OnFailure: lifecycle.OnFailureBlock}}, admin); err != nil {
				t.Fatal(err)
			}
			if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "orders"}, admin); err != nil {
				t.Fatal(err)
			}
			keyed := func(key string) *projection.Message {
				m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"), OrderingKey: key})
				if err != nil {
					t.Fatal(err)
				}
				b.clock.Advance(time.Millisecond)
				return m
			}
			for _, key := range []string{"k1", "k2", "k3"} {
				head := keyed(key)
				keyed(key) // blocked behind the head
				b.settle(t, head, "orders", lifecycle.Failed("400"))
			}
			b.settle(t, keyed("k4"), "orders", lifecycle.Delivered("200"))
			keyed("k4") // the head of its lane, in hand

			spec := commands.OperationSpec{Action: action, Filter: lifecycle.OperationFilter{Source: "erp"}}
			before := journalLength(t, b)
			pv, err := b.w.PreviewOperation(b.ctx, spec, "alice", 20)
			if err != nil {
				t.Fatal(err)
			}
			if n := journalLength(t, b); n != before {
				t.Fatalf("the dry run wrote %d events", n-before)
			}
			o := b.run(t, b.r, b.create(t, spec))
			refused := 0
			for _, c := range pv.Refused {
				refused += c.Count
			}
			if pv.Matched != o.Matched || pv.Done != o.Done || refused != o.Refused {
				t.Fatalf("dry run: matched %d, done %d, refused %d; the run: matched %d, done %d, refused %d",
					pv.Matched, pv.Done, refused, o.Matched, o.Done, o.Refused)
			}
			dbtest.Audit(t, b.db)
		})
	}
}

// TestDryRunWithinItsTime: a dry run decides for commands.PreviewBudget at
// most, then counts the messages left without deciding them, so it answers
// in a request's time however many match; it says how many it decided.
func TestDryRunWithinItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	for range 150 {
		b.ingest(t)
	}
	// A clock that moves past the budget at the first page's end: each
	// read of it is a minute on.
	var ticks atomic.Int64
	base := service.Base{Logger: quiet, Now: func() time.Time {
		return b.clock.Now().Add(time.Duration(ticks.Add(1)) * time.Minute)
	}}
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	spec := commands.OperationSpec{Action: lifecycle.ActionSkip, Filter: lifecycle.OperationFilter{Source: "erp"}}
	pv, err := w.PreviewOperation(b.ctx, spec, "alice", 5)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, c := range pv.Refused {
		refused += c.Count
	}
	if pv.Matched != 150 || pv.Decided >= pv.Matched || pv.Done+refused != pv.Decided {
		t.Fatalf("matched %d, decided %d, done %d, refused %d; want 150 matched, fewer decided, and those counted",
			pv.Matched, pv.Decided, pv.Done, refused)
	}
}

// TestResendKeepsTheLanesOrder: messages of one ordering key are resent in
// their lane's order, not in that of their creation times, which
// processes whose clocks differ can give the other way round.
func TestResendKeepsTheLanesOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "orders", Kind: "http", Enabled: true,
		Config:   json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}}, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "orders"}, admin); err != nil {
		t.Fatal(err)
	}
	// A second process, its clock a second behind.
	behind := testclock.New(b.clock.Now().Add(-time.Second))
	w2, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: behind.Now, Logger: quiet}, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(w *commands.Writer) *projection.Message {
		m, _, err := w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x"), OrderingKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, second := keyed(b.w), keyed(w2) // created the other way round
	dbtest.Audit(t, b.db)                  // the second blocked behind the first
	b.settle(t, first, "orders", lifecycle.Delivered("200"))
	b.settle(t, second, "orders", lifecycle.Delivered("200"))

	o := b.run(t, b.r, b.create(t, commands.OperationSpec{Action: lifecycle.ActionResend, Filter: lifecycle.OperationFilter{Source: "erp"}}))
	if o.Done != 2 {
		t.Fatalf("operation %+v", o)
	}
	seq := func(m *projection.Message) int64 {
		t.Helper()
		now, err := projection.Load(b.ctx, b.db, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range now.Deliveries {
			if d.Generation == now.Generation {
				return d.LaneSeq
			}
		}
		t.Fatalf("message %s has no delivery of its generation", m.ID)
		return 0
	}
	if a, b := seq(first), seq(second); a > b {
		t.Errorf("the resend put the lane's second (place %d) ahead of its first (place %d)", b, a)
	}
	dbtest.Audit(t, b.db)
}
