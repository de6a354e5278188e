package commands

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
)

// subject names the message a command acts on: by its id, or by the id of
// one of its deliveries; the zero subject is a message the command makes.
// named tells the first two from it whatever the id, so that the nil UUID,
// which no message or delivery has, is not found rather than taken for a
// new message.
type subject struct {
	messageID, deliveryID uuid.UUID
	named                 bool
}

func message(id uuid.UUID) subject  { return subject{messageID: id, named: true} }
func delivery(id uuid.UUID) subject { return subject{deliveryID: id, named: true} }

func (s subject) String() string {
	if s.deliveryID != uuid.Nil {
		return "delivery " + s.deliveryID.String()
	}
	return "message " + s.messageID.String()
}

// op is one command waiting for, or written in, a batch.
type op struct {
	ctx    context.Context
	on     subject
	decide decision
	// read, when set, queues reads of the op's own on the batch's read,
	// after its messages are locked and read, so decide sees what they
	// read under the same locks.
	read func(b *pgx.Batch)
	// correlation, for a receipt by a receiver's id, is that id's
	// correlation, which read locks and reads: decide sees it as the ops
	// before it in the batch left it.
	correlation *correlated
	// gone, for an outcome lifecycle.Gone, is what read read of its
	// target: the batch disables the target (disabling).
	gone *goneRead
	// key is the id of the op's message when the Writer knows it, else
	// uuid.Nil: a new message, or a delivery it has not written.
	key uuid.UUID
	// made, for an ingest, is the id of the message its last decision
	// made, which a transaction that failed for a reason that can pass may
	// have committed all the same (storedAnyway).
	made uuid.UUID
	// dup, for an ingest with a duplicate key, is the latest earlier
	// message of its source with the key, which the batch finds before it
	// decides.
	dup *dupLookup
	// done receives false once the batch has set the result below, and
	// true when the op's goroutine is to lead; led says it has been told
	// (or led from the start), under the batcher's lock. Two slots, as
	// both may come before either is read.
	done chan bool
	led  bool
	// claimNext, for a worker's outcome, is the lease of a claim of the
	// delivery the outcome lets go in its lane or, with claimDue on a
	// target without lanes, of the target's oldest due delivery: the batch
	// takes it in the same transaction, for the same worker (next, on its
	// message's change nextC), instead of a claim of its own; with the
	// token nextToken.
	claimNext time.Duration
	claimDue  bool
	nextToken uuid.UUID
	// handOff, for an ingest, claims the deliveries the op wakes for the
	// Writer's Taker (handOff); slots are the slots reserved, by target,
	// and handed the claims made in them, for handOver once the batch ends.
	handOff bool
	slots   map[string]Slot
	handed  []handed
	// claims is set on a Claim's op, which the batch decides after the
	// ops that may end attempts (decisionOrder).
	claims bool
	// health are the changes of targets' health the batch's outcomes call
	// for, which the op's goroutine runs once its result is set.
	health []healthStep
	// Set by the batch: the message as read, the change written (nil when
	// decide wrote nothing) or the error; and the claim of claimNext.
	m     *projection.Message
	c     *change
	err   error
	next  *Claim
	nextC *change
}

// Batching bounds: the commands in one transaction, and the transactions
// one Writer has open at once.
const (
	maxBatch   = 64
	maxLeaders = 2
)

// batcher gathers the commands that arrive while earlier ones are being
// written, and writes them together as the next batch: one transaction that
// locks and reads their existing messages, decides each command in turn and
// writes all the changes with one statement per table.
// There is no timer: a command that finds fewer than maxLeaders batches
// being written leads one at once, so batches grow only as commands queue
// up behind a busy database, and a quiet Writer writes each command alone.
// A leader is a caller's own goroutine; when its command is done and others
// wait, it hands the lead to the first of them.
//
// A batch leaves out the commands on a message that a batch being written
// holds: they would wait for its commit on the row lock, holding up the
// whole of their batch and every batch that waits on one of its messages
// in turn. They go into a batch formed once the message is free.
type batcher struct {
	mu      sync.Mutex
	pending []*op
	leaders int
	// held marks the messages of the batches being written; freed is
	// signalled, on mu, whenever a batch ends.
	held  map[uuid.UUID]bool
	freed *sync.Cond
}

// do runs o in a batch, written by run, and returns once o's result is set.
func (g *batcher) do(o *op, run func([]*op)) {
	g.mu.Lock()
	g.pending = append(g.pending, o)
	lead := g.leaders < maxLeaders
	if lead {
		o.led = true
		g.leaders++
	} else if g.freed != nil {
		// A leader may be waiting for held messages to be freed: o may be
		// on a free one, and is taken at once rather than after them.
		g.freed.Broadcast()
	}
	g.mu.Unlock()
	if !lead && !<-o.done {
		return
	}
	// o's goroutine leads: it writes batches until one holds o.
	for {
		g.mu.Lock()
		var batch []*op
		for {
			if !slices.Contains(g.pending, o) {
				// Another leader took o into its batch and will tell it;
				// this goroutine's lead passes on rather than keep its
				// caller.
				g.handOff()
				g.mu.Unlock()
				<-o.done
				return
			}
			if batch = g.take(); len(batch) > 0 {
				break
			}
			// Every waiting command's message is held by a batch being
			// written, whose end signals freed, as does a new command.
			g.freed.Wait()
		}
		g.mu.Unlock()

		run(batch)
		g.mu.Lock()
		for _, b := range batch {
			delete(g.held, b.key)
		}
		g.freed.Broadcast()
		g.mu.Unlock()
		mine := false
		for _, b := range batch {
			if b == o {
				mine = true
			} else {
				b.done <- false
			}
		}
		if mine {
			g.mu.Lock()
			g.handOff()
			g.mu.Unlock()
			return
		}
	}
}

// take removes from pending, in order, up to maxBatch commands whose
// message no batch being written holds, and marks their messages held.
// The caller holds g.mu.
func (g *batcher) take() []*op {
	if g.freed == nil {
		g.freed, g.held = sync.NewCond(&g.mu), map[uuid.UUID]bool{}
	}
	var batch []*op
	taken := map[uuid.UUID]bool{}
	left := g.pending[:0]
	for _, p := range g.pending {
		if len(batch) < maxBatch && (p.key == uuid.Nil || !g.held[p.key] || taken[p.key]) {
			batch = append(batch, p)
			taken[p.key] = true
		} else {
			left = append(left, p)
		}
	}
	clear(g.pending[len(left):])
	g.pending = left
	for k := range taken {
		if k != uuid.Nil {
			g.held[k] = true
		}
	}
	return batch
}

// handOff passes a leader's place to the first waiting command that has
// none, or gives it up when every waiting command has a leader. The caller
// holds g.mu.
func (g *batcher) handOff() {
	for _, p := range g.pending {
		if !p.led {
			p.led = true
			p.done <- true
			return
		}
	}
	g.leaders--
}

// runBatch writes the ops as one transaction, reading again after a lost
// race. An op whose decide failed keeps its own error; when the transaction
// fails, every other op gets its error. A batch that fails on an
// idempotency key, or panics, is written again one op at a time, so that
// only the message whose key is taken, or the op that panics, fails.
func (w *Writer) runBatch(ops []*op) {
	if w.batched != nil {
		w.batched(len(ops))
	}
	ctx, cancel := batchContext(ops)
	defer cancel()
	err := w.retry(ctx, ops, nil)
	var p *panicError
	if (isIdempotencyConflict(err) || errors.Is(err, errLaneSplit) || errors.As(err, &p)) && len(ops) > 1 {
		for _, o := range ops {
			w.fail([]*op{o}, w.retry(ctx, []*op{o}, nil))
		}
		return
	}
	w.fail(ops, err)
}

// retry writes the ops, and side when there is one, reading and deciding
// again after a lost race, up to maxTries. A panic in a try is its error,
// not tried again.
func (w *Writer) retry(ctx context.Context, ops []*op, side *operationSide) error {
	for try := 1; ; try++ {
		err := w.tryBatch(ctx, ops, side)
		if !retryable(err) || try == maxTries {
			return err
		}
		if targetDisabled(err) {
			// Decide again on the configuration as it is now.
			w.Invalidate()
		}
		if target, ok := targetHeld(err); ok {
			// Decide again without its claims.
			w.holdTarget(target)
		}
		if target, ok := targetLimited(err); ok {
			w.limitTarget(target)
		}
		if w.lost != nil {
			w.lost(err)
		}
	}
}

// tryBatch is writeBatch with a panic turned into its error (recovered),
// so that the panic fails the batch's commands rather than the goroutine
// that leads it, whose caller would never hand the lead on nor free the
// batch's messages (batcher), wedging the Writer.
func (w *Writer) tryBatch(ctx context.Context, ops []*op, side *operationSide) (err error) {
	defer w.recovered(&err, "a batch of commands")
	return w.writeBatch(ctx, ops, side)
}

// fail gives err, when there is one, to the ops that have no error of their
// own.
func (w *Writer) fail(ops []*op, err error) {
	if err == nil {
		return
	}
	for _, o := range ops {
		if o.err == nil {
			o.m, o.c, o.err = nil, nil, err
		}
	}
}

// batchContext is cancelled once every op's context is done: a batch ends
// early only when no command in it is still waiting for it.
func batchContext(ops []*op) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(ops)))
	stops := make([]func() bool, len(ops))
	for i, o := range ops {
		stops[i] = context.AfterFunc(o.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// writeBatch runs the ops in one transaction on a connection of its own.
// With ops on existing messages it takes two round trips: BEGIN with the
// lock of the message rows, then the writes of all the changes with COMMIT.
// Outcomes that claim a due delivery next choose, lock and read it with
// the lock (queueChooseDue). The messages locked that the Writer does not
// hold at the version locked (see Writer.written), and those the choice
// read at another version than it locked, it reads in one more round trip
// between the two. Ops
// on one message are decided in turn, each on the state the one before
// left, and their changes are written as one. Ops that make new
// messages read nothing: a batch of only those is one round trip, its
// writes sent as an implicit transaction. A batch whose ops move a lane
// (see lanes.go) reads and locks those lanes in one more round trip before
// it decides again. A batch of a bulk operation (side) also locks and
// reads the operation's row first, and writes the operation's progress
// with its ops' changes; a preview's (a side without an operation) rolls
// back once its ops are decided.
func (w *Writer) writeBatch(ctx context.Context, ops []*op, side *operationSide) error {
	// The configuration is read before a connection is taken, so a batch
	// never waits for a second one while it holds locks.
	cfg, err := w.config(ctx)
	if err != nil {
		return err
	}
	conn, err := w.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer w.release(conn)
	messageIDs, deliveryIDs := []uuid.UUID{}, []uuid.UUID{}
	for _, o := range ops {
		switch {
		case o.on.deliveryID != uuid.Nil:
			deliveryIDs = append(deliveryIDs, o.on.deliveryID)
		case o.on.messageID != uuid.Nil:
			messageIDs = append(messageIDs, o.on.messageID)
		}
	}
	dups := dupKeys(ops)
	explicit := len(messageIDs)+len(deliveryIDs)+len(dups) > 0 || side != nil
	read := map[uuid.UUID]*projection.Message{}
	var latest map[dupKey]uuid.UUID
	due := &chosen{}
	if explicit {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(projection.LookupPlanSQL)
		if side != nil {
			side.queueRead(b)
		}
		var locked func() []projection.Locked
		if ids, ok := w.laneFreeMessages(messageIDs, deliveryIDs); ok {
			locked = projection.LockMessages(b, ids)
		} else {
			locked = projection.Lock(b, messageIDs, deliveryIDs)
		}
		for _, o := range ops {
			if o.read != nil {
				o.read(b)
			}
		}
		found := queueDuplicates(b, dups)
		due = w.queueChooseDue(b, ops, cfg)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		var unread []uuid.UUID
		read, unread = w.heldAt(locked())
		latest = found()
		for target, tokens := range due.tokens {
			w.learnTokens(cfg.targets[target], *tokens, len(due.byTarget[target]), due.now)
		}
		for id, m := range due.messages {
			switch {
			case read[id] != nil:
			case m != nil:
				read[id] = m
				unread = slices.DeleteFunc(unread, func(u uuid.UUID) bool { return u == id })
			case !slices.Contains(unread, id):
				unread = append(unread, id)
			}
		}
		if len(unread) > 0 {
			// Locked already, by the lock or the choice: a read in a
			// statement of its own sees the rows as they are.
			ms, err := projection.LoadMany(ctx, conn, unread)
			if err != nil {
				return fmt.Errorf("read the locked messages: %w", err)
			}
			for _, m := range ms {
				read[m.ID] = m
			}
		}
	}

	now := w.now()
	var (
		lanes []projection.LaneRead
		d     *decided
	)
	for {
		d = w.decide(ops, read, lanes, latest, due.byTarget, cfg, now)
		if len(d.lanesNeeded) == 0 {
			break
		}
		// Some op moves a lane this batch has not read: lock and read those
		// lanes, then decide every op again on what was read.
		b := &pgx.Batch{}
		if !explicit {
			b.Queue(`BEGIN`)
			b.Queue(projection.LookupPlanSQL)
			explicit = true
		}
		more := queueLanes(b, d.lanesNeeded)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read lanes: %w", err)
		}
		lanes = append(lanes, more()...)
	}
	if d.err != nil {
		return d.err
	}
	if side != nil {
		if err := side.decide(ops, d, now); err != nil {
			return err
		}
		if side.want == nil {
			// A preview's batch writes nothing: end the transaction, which
			// only locked and read.
			if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
				return fmt.Errorf("roll back: %w", err)
			}
			return nil
		}
	}
	if len(d.changes) == 0 && len(d.events) == 0 {
		if explicit {
			// Nothing to write: end the transaction, which only read.
			if _, err := conn.Exec(ctx, `COMMIT`); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
		}
		return nil
	}
	got, err := w.commit(ctx, conn, cfg, d.changes, d.events, d.lanes, d.operation, explicit, w.uncounted.take(tallies(d.events, cfg), now), now)
	if err != nil {
		return &sentError{err}
	}
	counted := got.counted
	steps := healthSteps(counted, d.events, attemptLeases(d.changes), cfg, now)
	for _, h := range counted {
		w.learnHealth(h)
		w.uncounted.learn(h, slices.ContainsFunc(steps, func(s healthStep) bool { return s.target == h.Target }))
	}
	if len(steps) > 0 {
		// The first op written runs them once its result is set.
		for _, o := range ops {
			if o.c != nil && o.err == nil {
				o.health = steps
				break
			}
		}
	}
	if len(d.disabled) > 0 {
		w.tellDisabled()
	}
	for _, o := range ops {
		if o.c != nil && o.c.readBody {
			o.c.body, o.c.shapes = got.payloads[o.c.after.ID], got.shapes
		}
		if o.next != nil {
			o.next.Message, o.next.Payload = o.nextC.after, got.payloads[o.nextC.after.ID]
			o.next.Shape = shapeOf(got.shapes, o.next.Delivery.ID)
		}
	}
	return nil
}

// sentError is the error of a batch whose writes and commit were sent: a
// connection lost then may have lost only the answer to the commit
// (storedAnyway). It reads as the error it wraps.
type sentError struct{ err error }

func (e *sentError) Error() string { return e.err.Error() }
func (e *sentError) Unwrap() error { return e.err }

// correlated is a receiver's id's correlation as a batch's read locked it
// (read), and as the ops decided before an op of the batch left it (now),
// which the batch sets before it decides that op.
type correlated struct {
	key       projection.CorrelationKey
	read, now projection.Correlation
}

// decided is what deciding a batch's ops came to: the changes to write, one
// per message, all their events in the order they were recorded, and the
// lanes they moved; or the lanes that must be read first; or an error
// that fails the batch. operation queues the write of the batch's bulk
// operation's row, when it has one; its event follows the ops'. disabled
// are the targets the batch disables, whose events are among events.
type decided struct {
	changes     []*change
	events      []journal.Event
	lanes       []projection.Lane
	lanesNeeded []projection.LaneID
	operation   func(*pgx.Batch)
	disabled    []string
	err         error
}

// decide decides every op, in order, on the messages and lanes as read,
// each on the state the ops before it left, and keeps the lanes in step;
// so too the correlations, when an op reads one (a receipt by id), by the
// events the ops before it recorded (projection.Correlates), as the
// journal will order them.
func (w *Writer) decide(ops []*op, read map[uuid.UUID]*projection.Message, lanes []projection.LaneRead,
	latest map[dupKey]uuid.UUID, due map[string][]uuid.UUID, cfg *configState, now time.Time) *decided {
	latest, due = maps.Clone(latest), maps.Clone(due)
	d := &decided{}
	state := make(map[uuid.UUID]*projection.Message, len(read))
	maps.Copy(state, read)
	owner := map[uuid.UUID]uuid.UUID{}
	for _, m := range read {
		for _, dl := range m.Deliveries {
			owner[dl.ID] = m.ID
		}
	}
	book := newLaneBook(cfg, state, lanes)
	dis := &disabling{}
	off := func(target string) bool { return dis.off(cfg, target) || w.gates.shut(target, now) }
	defer func() { d.lanes, d.disabled = book.Changed(), dis.targets }()
	merged := map[uuid.UUID]*change{}
	// made are the correlations the events kept so far make, kept only
	// when an op of the batch reads one.
	var made map[projection.CorrelationKey]projection.Correlation
	if slices.ContainsFunc(ops, func(o *op) bool { return o.correlation != nil }) {
		made = map[projection.CorrelationKey]projection.Correlation{}
	}
	keep := func(c *change) {
		id := c.after.ID
		state[id] = c.after
		d.events = append(d.events, c.events...)
		if made != nil {
			for _, e := range c.events {
				if key, cr, ok := projection.Correlates(e, id); ok {
					made[key] = cr
				}
			}
		}
		if all := merged[id]; all != nil {
			all.after = c.after
			all.events = append(all.events, c.events...)
			all.touched = append(all.touched, c.touched...)
			all.readBody = all.readBody || c.readBody
			all.extra = append(all.extra, c.extra...)
			return
		}
		all := &change{before: c.before, after: c.after, readBody: c.readBody, body: c.body,
			events: append([]journal.Event(nil), c.events...), touched: append([]uuid.UUID(nil), c.touched...),
			extra: slices.Clone(c.extra)}
		merged[id] = all
		d.changes = append(d.changes, all)
	}
	for _, o := range decisionOrder(ops) {
		o.m, o.c, o.err, o.next, o.nextC, o.handed, o.health = nil, nil, nil, nil, nil, nil, nil
		if err := o.ctx.Err(); err != nil {
			o.err = err
			continue
		}
		var m *projection.Message
		if o.on.named {
			id := o.on.messageID
			if o.on.deliveryID != uuid.Nil {
				id = owner[o.on.deliveryID]
			}
			if m = state[id]; m == nil {
				o.err = fmt.Errorf("load %s: %w", o.on, projection.ErrNotFound)
				continue
			}
		}
		if o.dup != nil {
			o.dup.latest = latest[o.dup.dupKey]
		}
		if cr := o.correlation; cr != nil {
			var ok bool
			if cr.now, ok = made[cr.key]; !ok {
				cr.now = cr.read
			}
		}
		c, err := o.decide(m, book, now)
		var unknown *projection.LaneUnknownError
		if errors.As(err, &unknown) {
			d.lanesNeeded = append(d.lanesNeeded, unknown.Lane)
			continue
		}
		if err != nil {
			o.err = err
			continue
		}
		if c != nil {
			if target := claimsOff(c, off); target != "" {
				reason := fmt.Sprintf("its target %s is disabled", target)
				if !dis.off(cfg, target) {
					reason = fmt.Sprintf("its target %s is held by its health or limits", target)
				}
				o.err = &StateError{Err: ErrNotClaimable, Reason: reason}
				continue
			}
		}
		o.m, o.c = m, c
		if c == nil {
			continue
		}
		follow, err := keepLanes(book, c, state, now)
		if errors.As(err, &unknown) {
			d.lanesNeeded = append(d.lanesNeeded, unknown.Lane)
			continue
		}
		if err != nil {
			// The lanes read do not match the messages locked: another
			// writer moved a lane meanwhile. Read again.
			d.err = err
			return d
		}
		if o.dup != nil {
			latest[o.dup.dupKey] = c.after.ID
		}
		var disabled *journal.Event
		if o.gone != nil {
			if disabled, err = dis.disable(c, o.gone, o.on.deliveryID, now); err != nil {
				d.err = err
				return d
			}
		}
		if o.claimNext > 0 {
			if target := c.after.Delivery(o.on.deliveryID).Target; !off(target) {
				o.next, o.nextC = claimFreed(follow, target, o.nextToken, o.claimNext, now)
			}
		}
		if o.handOff {
			w.handOff(o, c, now, off)
		}
		keep(c)
		if disabled != nil {
			d.events = append(d.events, *disabled)
		}
		for _, f := range follow {
			// The op's caller publishes the wake-ups of what it caused.
			c.wakeups = append(c.wakeups, f.wakeups...)
			keep(f)
		}
		if o.claimDue && o.next == nil {
			if target := c.after.Delivery(o.on.deliveryID).Target; !off(target) {
				if o.next, o.nextC = claimChosen(due, state, owner, target, o.nextToken, o.claimNext, now); o.nextC != nil {
					keep(o.nextC)
				}
			}
		}
	}
	return d
}

// decisionOrder is ops with the claims and the ingests (which may hand
// off claims) last, each part in its own order. targets_admit counts a
// target's attempts in flight at commit, after the batch's outcomes ended
// theirs; the journal, which the audit folds event by event, then never
// shows a claim taking the place of an attempt before the attempt ended.
func decisionOrder(ops []*op) []*op {
	later := func(o *op) bool { return o.claims || !o.on.named }
	order := make([]*op, 0, len(ops))
	for _, o := range ops {
		if !later(o) {
			order = append(order, o)
		}
	}
	for _, o := range ops {
		if later(o) {
			order = append(order, o)
		}
	}
	return order
}

// chosen is what queueChooseDue chose, once the batch is read: by target,
// the deliveries the batch's outcomes may claim, oldest due first, and the
// messages they are on, as the choice read them (nil for one it read at
// another version than it locked).
type chosen struct {
	byTarget map[string][]uuid.UUID
	messages map[uuid.UUID]*projection.Message
	// tokens are what the buckets of the targets with a rate held, read
	// with the choice, for learnTokens.
	tokens map[string]**float64
	now    time.Time
}

// queueChooseDue queues on b, after the locks and reads of the batch's
// messages, the choice of a due delivery for each outcome among ops that
// claims a due one (claimDue) on an enabled target without lanes, whose
// target the Writer knows: as many of the target's deliveries as a worker
// may take now, oldest due first, locked and skipping those other
// transactions hold, as ClaimDue chooses them (at a clock reading of its
// own: what is due then is due at the batch's later one). Queued after the
// locks, it leaves the transaction waiting for no lock once it holds those
// it chose.
func (w *Writer) queueChooseDue(b *pgx.Batch, ops []*op, cfg *configState) *chosen {
	c := &chosen{byTarget: map[string][]uuid.UUID{}, messages: map[uuid.UUID]*projection.Message{},
		tokens: map[string]**float64{}, now: w.now()}
	want := map[string]int{}
	for _, o := range ops {
		if !o.claimDue {
			continue
		}
		if t, ok := cfg.targets[w.owner(o.on.deliveryID).target]; ok && t.Enabled && !t.Ordering.FIFO() {
			want[t.Name]++
		}
	}
	if len(want) > 0 {
		// Each outcome ends an attempt in flight, which the choice's count
		// of them still finds.
		for target := range want {
			if cfg.targets[target].Rate != nil {
				c.tokens[target] = new(*float64)
				queueReadTokens(b, target, c.now, c.tokens[target])
			}
		}
		w.queueChoice(b, cfg, c.now, want, want, func(target string, ch projection.Chosen) {
			c.byTarget[target] = append(c.byTarget[target], ch.DeliveryID)
			c.messages[ch.MessageID] = ch.Message
		})
	}
	return c
}

// claimChosen claims with token for an outcome the first of the target's
// deliveries in due, chosen by queueChooseDue, that the fold finds
// claimable on the state the batch has come to, and takes it out of due.
func claimChosen(due map[string][]uuid.UUID, state map[uuid.UUID]*projection.Message, owner map[uuid.UUID]uuid.UUID,
	target string, token uuid.UUID, lease time.Duration, now time.Time) (*Claim, *change) {
	for len(due[target]) > 0 {
		id := due[target][0]
		due[target] = due[target][1:]
		m := state[owner[id]]
		if m == nil {
			continue
		}
		if claim, c, err := claimOn(m, id, token, lease, now); err == nil {
			return &claim, c
		}
	}
	return nil, nil
}

// read is what a transaction read for the claims it made, by message id
// the payloads, by delivery id the shapes of those messages' deliveries,
// and the targets' health rows its outcomes counted into.
type read struct {
	payloads map[uuid.UUID][]byte
	shapes   map[uuid.UUID]routing.Shaped
	counted  []projection.TargetHealth
}

// shapeOf is the shape of the delivery id among shapes, nil when it has
// none.
func shapeOf(shapes map[uuid.UUID]routing.Shaped, id uuid.UUID) *routing.Shaped {
	if s, ok := shapes[id]; ok {
		return &s
	}
	return nil
}

// commit is the write round trip of a transaction on conn: the changes,
// decided with cfg (nil when they claim no delivery), their events in the order recorded, the lanes they moved, the read of the
// bodies and shapes those that ask for one want, and COMMIT when the
// transaction is explicit (else the batch is an implicit one). The
// outcomes' tallies count into their targets' health after the COMMIT,
// in the same round trip (projection.QueueCount), at now; a count that
// fails leaves the breaker's window short, not the outcomes unrecorded.
// It returns what it read and counted, and remembers which message each
// delivery written belongs to, for the batcher.
func (w *Writer) commit(ctx context.Context, conn *pgxpool.Conn, cfg *configState, changes []*change, events []journal.Event,
	lanes []projection.Lane, operation func(*pgx.Batch), explicit bool, tallies []projection.OutcomeTally, now time.Time) (read, error) {
	b := &pgx.Batch{}
	if len(tallies) > 0 && !explicit {
		// The count must follow a COMMIT, not join the outcomes' writes.
		b.Queue(`BEGIN`)
		explicit = true
	}
	if err := w.queue(b, cfg, changes, events, lanes, operation); err != nil {
		return read{}, err
	}
	var withBody, shaped []uuid.UUID
	for _, c := range changes {
		if c.readBody {
			withBody = append(withBody, c.after.ID)
			for _, d := range c.after.Deliveries {
				if d.Shaped {
					shaped = append(shaped, d.ID)
				}
			}
		}
	}
	var r read
	if len(withBody) > 0 {
		r.payloads = projection.QueuePayloads(b, withBody)
	}
	if len(shaped) > 0 {
		r.shapes = projection.QueueShapes(b, shaped)
	}
	committed := !explicit
	if explicit {
		b.Queue(`COMMIT`).Exec(func(pgconn.CommandTag) error {
			committed = true
			return nil
		})
	}
	var counted func() []projection.TargetHealth
	if len(tallies) > 0 {
		counted = projection.QueueCount(b, tallies, now)
	}
	if err := w.send(ctx, conn, b); err != nil {
		if !committed || counted == nil {
			return read{}, err
		}
		w.log.Warn("outcomes not counted into target health", "err", err)
	} else if counted != nil {
		var err error
		if r.counted, err = projection.CountMissing(ctx, conn, tallies, counted(), now); err != nil {
			w.log.Warn("outcomes not counted into target health", "err", err)
		}
	}
	written := make([]*projection.Message, len(changes))
	for i, c := range changes {
		written[i] = c.after
	}
	w.learn(written...)
	return r, nil
}
