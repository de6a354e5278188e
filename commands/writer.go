package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/internal/seal"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
	"github.com/waybill/waybill/service"
)

// Wakeup tells a target's workers that a delivery may be claimed.
type Wakeup struct {
	DeliveryID uuid.UUID
	Target     string
}

// Notifier takes the wake-ups of a committed command. Notify must not block
// and must not fail the command: a lost wake-up is recovered by the sweep.
type Notifier interface {
	Notify(wakeups []Wakeup)
}

// Observer is told what the committed commands did, for the metrics.
type Observer interface {
	// Delivered tells that a delivery to target became delivered, took
	// after its ingest, or the redelivery that began it again, in the
	// sampled trace of traceID, "" when there is none or tracing is off.
	// It must not block.
	Delivered(target string, took time.Duration, traceID string)
}

// Config configures a Writer.
type Config struct {
	// Base gives the clock, which every decision reads once per batch, and
	// the logger.
	service.Base
	// DB is the database; required.
	DB *pgxpool.Pool
	// Notifier receives wake-ups after commit; nil drops them, leaving
	// every delivery to the sweep.
	Notifier Notifier
	// Observer is told of the deliveries the commands delivered; nil
	// tells nobody.
	Observer Observer
	// ConfigTTL bounds how long a configuration written by another process
	// (or behind Waybill's back) may go unseen. Default 30 s.
	ConfigTTL time.Duration
	// Secrets seals and opens the targets' signing keys; every process on
	// the database must hold the same key (seal.Box.Check). Without it
	// the Writer makes no target that signs and opens no key
	// (ErrNoSecrets): enough for a client that only ingests.
	Secrets *seal.Box
	// MaxPayload bounds the payload a target's transform makes, as the
	// server bounds a message's (--max-payload): a larger one fails its
	// delivery. Default lifecycle.DefaultMaxPayload.
	MaxPayload int64
}

// Writer runs the commands.
type Writer struct {
	db       *pgxpool.Pool
	notifier Notifier
	observer Observer
	clock    func() time.Time
	ttl      time.Duration
	log      *slog.Logger
	secrets  *seal.Box
	tracer   trace.Tracer
	// maxPayload is Config.MaxPayload.
	maxPayload int64

	mu     sync.Mutex
	cached *configState
	// invalidated counts the Invalidate calls, so a load begun before
	// one is not cached after it.
	invalidated uint64

	// batches gathers the message commands into transactions.
	batches batcher
	// owners maps the deliveries the Writer has written to their
	// messages and targets, so that a command on a delivery is known to be
	// on its message before it is read (see batcher), and an outcome's
	// batch knows whose due deliveries to choose (queueChooseDue); up to
	// maxOwners, then it starts over. written holds the messages it wrote,
	// as it wrote them, so that a batch need not read those its lock finds
	// still at that version (projection.Lock); up to maxWritten, then it
	// starts over.
	ownersMu sync.Mutex
	owners   map[uuid.UUID]owner
	written  map[uuid.UUID]*projection.Message
	// cursors keeps where each target's choices of due deliveries start.
	cursors claimCursors
	// gates keeps the targets' health as last read (health.go).
	gates gates
	// uncounted keeps the successes not yet counted into the targets' breaker
	// windows (health.go).
	uncounted heldCounts
	// taker, when set, takes the deliveries ingests dispatch (SetTaker).
	taker atomic.Pointer[Taker]
	// disabled, when set, is told of the targets an outcome disabled
	// (OnDisable).
	disabled atomic.Pointer[func()]

	// cut, set by tests, may queue statements at the named points of a
	// command's batch (to end the session there, as a crash would).
	cut func(point string, b *pgx.Batch)
	// lost, set by tests, is told of each lost race before the retry.
	lost func(err error)
	// batched, set by tests, is told the size of each batch.
	batched func(n int)
}

// New returns a Writer.
func New(cfg Config) (*Writer, error) {
	if cfg.DB == nil {
		return nil, errors.New("commands: Config.DB is required")
	}
	base := cfg.Base.WithDefaults()
	w := &Writer{db: cfg.DB, notifier: cfg.Notifier, observer: cfg.Observer, clock: base.Now, ttl: cfg.ConfigTTL, log: base.Logger, secrets: cfg.Secrets,
		tracer: base.Tracer, maxPayload: cfg.MaxPayload}
	if w.ttl <= 0 {
		w.ttl = 30 * time.Second
	}
	if w.maxPayload <= 0 {
		w.maxPayload = lifecycle.DefaultMaxPayload
	}
	return w, nil
}

// now is the clock as the database stores it (journal.StoredTime), so a
// decision compares the same instants the SQL predicates compare.
func (w *Writer) now() time.Time { return journal.StoredTime(w.clock()) }

// maxTries bounds the reads again after losing a race on one message. A
// command holds the message row lock from its read to its commit, so a race
// is lost only when something writes the message without taking the lock.
const maxTries = 10

// change is what a command decided: the message as read (nil for a new
// one) and as the events recorded on it left it, the deliveries they
// touched, the wake-ups to publish after commit, and the error to return
// once it is committed (a refusal that is journaled). A claim's change asks
// for the message's body, read in the same transaction into body; a new
// message's change holds the body to store; an expunge's drops it.
type change struct {
	before   *projection.Message
	after    *projection.Message
	events   []journal.Event
	touched  []uuid.UUID
	wakeups  []Wakeup
	result   error
	readBody bool
	body     []byte
	// shapes are the shapes of the deliveries the change made, by id, for
	// the claims an ingest hands over.
	shapes map[uuid.UUID]routing.Shaped
	// extra are statements of the command's own, written in its
	// transaction after everything else.
	extra []func(*pgx.Batch)
}

// also adds statements of the command's own to the change: queue adds
// them to the batch of its transaction.
func (c *change) also(queue func(*pgx.Batch)) { c.extra = append(c.extra, queue) }

// record folds e into the change's state and keeps it.
func (c *change) record(e journal.Event) error {
	e, err := projection.Record(c.after, e)
	if err != nil {
		return err
	}
	c.events = append(c.events, e)
	if e.DeliveryID != uuid.Nil {
		c.touched = append(c.touched, e.DeliveryID)
	}
	return nil
}

// newChange starts a change on a copy of m, or on a new stream for nil.
func newChange(m *projection.Message) *change {
	if m == nil {
		return &change{after: &projection.Message{}}
	}
	return &change{before: m, after: m.Clone()}
}

// decision decides a command on the state of its message and of the lanes
// the batch read: the change to write, nil to write nothing, or an error
// that ends the command with nothing written. A *projection.LaneUnknownError
// asks the batch to read that lane and decide again.
type decision func(m *projection.Message, lanes *projection.LaneBook, now time.Time) (*change, error)

// run executes a command on the message it names (a new one for the zero
// subject): an existing message is read with its row locked, decide records
// the events on a change, and the change is written in the same
// transaction, which it shares with the commands gathered into the same
// batch (see batcher). It returns the message as the change left it, or as
// it was read when decide wrote nothing, and publishes the change's
// wake-ups once it is committed.
func (w *Writer) run(ctx context.Context, on subject, decide decision) (*projection.Message, error) {
	return w.runOp(&op{ctx: ctx, on: on, decide: decide})
}

// runReading is run for a command that reads more than its message: read
// queues its reads on the batch's read, after the message rows are locked
// and read (so what it reads is locked in that order), and decide sees
// what they read. An existing message only.
func (w *Writer) runReading(ctx context.Context, on subject, read func(*pgx.Batch), decide decision) (*projection.Message, error) {
	return w.runOp(&op{ctx: ctx, on: on, read: read, decide: decide})
}

// runOp runs o as run does.
func (w *Writer) runOp(o *op) (*projection.Message, error) {
	o.done, o.key = make(chan bool, 2), o.on.messageID
	if o.on.deliveryID != uuid.Nil {
		o.key = w.owner(o.on.deliveryID).message
	}
	w.batches.do(o, w.runBatch)
	w.handOver(o)
	if len(o.health) > 0 {
		w.runHealthSteps(o.health)
	}
	if o.err != nil {
		return nil, o.err
	}
	if o.c == nil {
		return o.m, nil
	}
	w.committed(o.c)
	return o.c.after, o.c.result
}

// maxOwners bounds Writer.owners.
const maxOwners = 1 << 16

// maxWritten bounds Writer.written: a message lives in the runtime for
// tens of milliseconds, a few thousand at most in flight at once.
const maxWritten = 1 << 13

// owner is a delivery's message and target, and whether the delivery is
// in a lane, which is decided at its dispatch for good.
type owner struct {
	message uuid.UUID
	target  string
	lane    bool
}

// owner returns the message and target of a delivery the Writer has
// written, else the zero owner.
func (w *Writer) owner(deliveryID uuid.UUID) owner {
	w.ownersMu.Lock()
	defer w.ownersMu.Unlock()
	return w.owners[deliveryID]
}

// laneFreeMessages gives the sorted messages of deliveryIDs, and true,
// when the batch names no message by id and the Writer has written each
// delivery and found it in no lane: the batch then locks them with
// projection.LockMessages, as no lane's next message is to be locked
// beside them.
func (w *Writer) laneFreeMessages(messageIDs, deliveryIDs []uuid.UUID) ([]uuid.UUID, bool) {
	if len(messageIDs) > 0 {
		return nil, false
	}
	w.ownersMu.Lock()
	defer w.ownersMu.Unlock()
	ids := make([]uuid.UUID, 0, len(deliveryIDs))
	for _, id := range deliveryIDs {
		o, ok := w.owners[id]
		if !ok || o.lane {
			return nil, false
		}
		ids = append(ids, o.message)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(ids), true
}

// learn remembers the messages ms, as a commit wrote them: the messages
// and targets of their deliveries, and a clone of each.
func (w *Writer) learn(ms ...*projection.Message) {
	w.ownersMu.Lock()
	defer w.ownersMu.Unlock()
	if w.owners == nil || len(w.owners) >= maxOwners {
		w.owners = make(map[uuid.UUID]owner)
	}
	if w.written == nil || len(w.written) >= maxWritten {
		w.written = make(map[uuid.UUID]*projection.Message)
	}
	for _, m := range ms {
		for _, d := range m.Deliveries {
			w.owners[d.ID] = owner{message: m.ID, target: d.Target, lane: d.LaneKey != ""}
		}
		w.written[m.ID] = m.Clone()
	}
}

// heldAt splits the messages a batch locked into those the Writer holds
// at the version locked, a clone of each by id, and the ids of the others,
// which the batch reads.
func (w *Writer) heldAt(locked []projection.Locked) (map[uuid.UUID]*projection.Message, []uuid.UUID) {
	w.ownersMu.Lock()
	defer w.ownersMu.Unlock()
	held := make(map[uuid.UUID]*projection.Message, len(locked))
	var unread []uuid.UUID
	for _, l := range locked {
		if m := w.written[l.ID]; m != nil && m.Version == l.Version {
			held[l.ID] = m.Clone()
		} else {
			unread = append(unread, l.ID)
		}
	}
	return held, unread
}

// rollbackTimeout bounds the rollback of a failed command, which runs even
// when the command's context is done.
const rollbackTimeout = 5 * time.Second

// release returns conn to the pool with no transaction open: a command
// that failed inside its transaction is rolled back, and a connection that
// cannot be rolled back, or whose state is unknown, is closed instead.
func (w *Writer) release(conn *pgxpool.Conn) {
	defer conn.Release() // the pool destroys a closed connection
	pg := conn.Conn().PgConn()
	if conn.Conn().IsClosed() || !pg.IsBusy() && pg.TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if pg.IsBusy() {
		conn.Conn().Close(ctx)
		return
	}
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil || pg.TxStatus() != 'I' {
		w.log.Warn("closing a connection left in a transaction", "err", err)
		conn.Conn().Close(ctx)
	}
}

// panicError is the error of a command that panicked: a bug, logged with
// its stack where it was recovered.
type panicError struct{ value any }

func (e *panicError) Error() string { return fmt.Sprintf("command panicked: %v", e.value) }

// recovered, deferred by a function that runs a transaction, turns a panic
// in it into its error, a *panicError, and logs the panic with its stack:
// a bug fails the commands of that transaction alone. The function's own
// deferred release has rolled the transaction back and returned its
// connection by then. what names the function in the log.
func (w *Writer) recovered(err *error, what string) {
	if v := recover(); v != nil {
		w.log.Error(what+" panicked", "panic", v, "stack", string(debug.Stack()))
		*err = &panicError{value: v}
	}
}

// queue adds to b the statements of the changes, at most one change per
// message, decided with cfg, and of the lanes they moved: the locks of
// the targets the events claim for or disable (queueTargetLocks), then the projection (its
// update locks the message rows) and the check of the claims' targets
// (queueTargetAdmit), with the row of the batch's bulk
// operation when it has one (operation), then the events in the order
// recorded, then the bodies of new messages, then the changes' extra
// statements (such as the deletion of an expunged payload).
func (w *Writer) queue(b *pgx.Batch, cfg *configState, changes []*change, events []journal.Event, lanes []projection.Lane,
	operation func(*pgx.Batch)) error {
	queueTargetLocks(b, events, cfg)
	writes := make([]projection.Write, len(changes))
	for i, c := range changes {
		writes[i] = projection.Write{Before: c.before, Message: c.after, Touched: c.touched, Events: c.events}
	}
	projection.Queue(b, lanes, writes...)
	queueTargetAdmit(b, events, cfg, w.uncounted.unclear)
	if operation != nil {
		operation(b)
	}
	w.cutAt("projected", b)
	if err := journal.Queue(b, events...); err != nil {
		return err
	}
	w.cutAt("appended", b)
	var ids []uuid.UUID
	var bodies [][]byte
	for _, c := range changes {
		if c.before == nil {
			ids, bodies = append(ids, c.after.ID), append(bodies, c.body)
		}
	}
	if len(ids) > 0 {
		projection.QueueInsertPayloads(b, ids, bodies)
	}
	for _, c := range changes {
		for _, queue := range c.extra {
			queue(b)
		}
	}
	return nil
}

// send runs b. Outside a transaction pgx pipelines the statements with a
// single sync, so the server commits all of them or none.
func (w *Writer) send(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, b *pgx.Batch) error {
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func (w *Writer) cutAt(point string, b *pgx.Batch) {
	if w.cut != nil {
		w.cut(point, b)
	}
}

// committed publishes the wake-ups of c, a committed change, and tells the
// observer of the deliveries it delivered.
func (w *Writer) committed(c *change) {
	if len(c.wakeups) > 0 && w.notifier != nil {
		w.notifier.Notify(c.wakeups)
	}
	if w.observer == nil {
		return
	}
	for i := range c.after.Deliveries {
		d := &c.after.Deliveries[i]
		if d.State != lifecycle.StateDelivered {
			continue
		}
		if c.before != nil {
			if was := c.before.Delivery(d.ID); was != nil && was.State == lifecycle.StateDelivered {
				continue
			}
		}
		began := d.CreatedAt
		if !d.RedeliveredAt.IsZero() {
			began = d.RedeliveredAt
		}
		w.observer.Delivered(d.Target, d.FinishedAt.Sub(began), w.sampledTraceID(c.after))
	}
}

// retryable reports a lost race: another writer took the stream version,
// moved the message row since it was read, or disabled a target claimed
// for since the configuration was read, or changed its health, or took
// its last slot or token.
func retryable(err error) bool {
	_, held := targetHeld(err)
	_, limited := targetLimited(err)
	return journal.IsVersionConflict(err) || errors.Is(err, errLaneRace) || targetDisabled(err) || held || limited || lostRace(err)
}

// lostRace reports a transaction PostgreSQL rolled back for another's
// sake: a serialization failure or a deadlock.
func lostRace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
