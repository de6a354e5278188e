package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
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

// Config configures a Writer.
type Config struct {
	// DB is the database; required.
	DB *pgxpool.Pool
	// Notifier receives wake-ups after commit; nil drops them, leaving
	// every delivery to the sweep.
	Notifier Notifier
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// ConfigTTL bounds how long a configuration written by another process
	// (or behind Waybill's back) may go unseen. Default 30 s.
	ConfigTTL time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Writer runs the commands.
type Writer struct {
	db       *pgxpool.Pool
	notifier Notifier
	clock    func() time.Time
	ttl      time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	cached *configState

	// cut, set by tests, may queue statements at the named points of a
	// command's batch (to end the session there, as a crash would).
	cut func(point string, b *pgx.Batch)
	// lost, set by tests, is told of each lost race before the retry.
	lost func(err error)
}

// New returns a Writer.
func New(cfg Config) (*Writer, error) {
	if cfg.DB == nil {
		return nil, errors.New("commands: Config.DB is required")
	}
	w := &Writer{db: cfg.DB, notifier: cfg.Notifier, clock: cfg.Now, ttl: cfg.ConfigTTL, log: cfg.Logger}
	if w.clock == nil {
		w.clock = time.Now
	}
	if w.ttl <= 0 {
		w.ttl = 30 * time.Second
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	return w, nil
}

// now is the clock at the precision PostgreSQL stores, so what the fold
// computed equals what it reads back.
func (w *Writer) now() time.Time { return w.clock().UTC().Truncate(time.Microsecond) }

// maxTries bounds the reads again after losing a race on one message. A
// command holds the message row lock from its read to its commit, so a race
// is lost only when something writes the message without taking the lock.
const maxTries = 10

// change is what a command decided: the events recorded on the state, the
// deliveries they touched, the wake-ups to publish after commit, and the
// error to return once it is committed (a refusal that is journaled).
type change struct {
	before  int
	after   *projection.Message
	events  []journal.Event
	touched []uuid.UUID
	wakeups []Wakeup
	extra   func(b *pgx.Batch)
	result  error
}

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
	return &change{before: m.Version, after: m.Clone()}
}

// loader queues a command's read on the batch that begins its transaction
// and returns the function that gives the state once the batch is read.
type loader func(b *pgx.Batch) func() (*projection.Message, error)

// run executes one message command: load reads the state, decide records the
// events on a change, and the change is written in the same transaction. A
// lost race reads again, up to maxTries. A nil change from decide writes
// nothing. A nil load reads nothing (a new stream): the change is written
// on its own.
func (w *Writer) run(ctx context.Context, load loader,
	decide func(m *projection.Message, now time.Time) (*change, error)) (*projection.Message, error) {
	for try := 1; ; try++ {
		var (
			m   *projection.Message
			c   *change
			err error
		)
		if load == nil {
			if c, err = decide(nil, w.now()); err == nil && c != nil {
				err = w.write(ctx, c)
			}
		} else {
			m, c, err = w.locked(ctx, load, decide)
		}
		if retryable(err) && try < maxTries {
			if w.lost != nil {
				w.lost(err)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if c == nil {
			return m, nil
		}
		w.notify(c.wakeups)
		return c.after, c.result
	}
}

// locked runs load and decide, and writes the change, in one transaction
// on a connection of its own, in two round trips: BEGIN with the read,
// which locks the message row, then the writes with COMMIT. A command on
// the same message waits for the lock and reads what this one committed.
func (w *Writer) locked(ctx context.Context, load loader,
	decide func(m *projection.Message, now time.Time) (*change, error)) (_ *projection.Message, _ *change, err error) {
	conn, err := w.db.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { w.release(conn) }()
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	read := load(b)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	m, err := read()
	if err != nil {
		return nil, nil, err
	}
	c, err := decide(m, w.now())
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		// Nothing to write: end the transaction, which only read.
		if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
			return nil, nil, fmt.Errorf("commit: %w", err)
		}
		return m, nil, nil
	}
	b = &pgx.Batch{}
	if err := w.queue(b, c); err != nil {
		return nil, nil, err
	}
	b.Queue(`COMMIT`)
	if err := w.send(ctx, conn, b); err != nil {
		return nil, nil, err
	}
	return m, c, nil
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

// write sends the change as one batch, an implicit transaction.
func (w *Writer) write(ctx context.Context, c *change) error {
	b := &pgx.Batch{}
	if err := w.queue(b, c); err != nil {
		return err
	}
	return w.send(ctx, w.db, b)
}

// queue adds the change's statements to b: the projection first (its update
// locks the message row), then the journal, then any extra rows.
func (w *Writer) queue(b *pgx.Batch, c *change) error {
	projection.Queue(b, c.before, c.after, c.touched)
	w.cutAt("projected", b)
	for _, e := range c.events {
		if err := journal.Queue(b, e); err != nil {
			return err
		}
	}
	w.cutAt("appended", b)
	if c.extra != nil {
		c.extra(b)
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

func (w *Writer) notify(wakeups []Wakeup) {
	if len(wakeups) > 0 && w.notifier != nil {
		w.notifier.Notify(wakeups)
	}
}

// retryable reports a lost race: another writer took the stream version or
// moved the message row since it was read.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return journal.IsVersionConflict(err) ||
		errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
