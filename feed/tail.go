package feed

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/waybill/waybill/journal"
)

// tailBatch bounds one read of the Tail.
const tailBatch = 500

// Tail tells a process's watchers of a stream that events of it have
// committed, whichever process wrote them: one reader of the journal for
// the whole process, in feed order (journal.ReadCommittedStreams), with
// no place kept. It reads only while something watches, from the horizon
// of the first Watch after none did; what committed before a watcher came
// the watcher reads for itself. Unlike a consumer group it holds nothing
// back: no place in feed_offsets that retention would wait for.
type Tail struct {
	db   journal.Querier
	poll time.Duration
	log  *slog.Logger

	mu sync.Mutex
	// watchers are the watches open, by stream; n counts them.
	watchers map[string]map[*Watch]struct{}
	n        int
	// mark is where the next read starts, valid while armed: armed by the
	// first Watch after none, disarmed by a read that finds none.
	mark    journal.Mark
	armed   bool
	started bool
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewTail returns a Tail that reads db every poll while something
// watches. Its reader starts at the first Watch; Stop ends it.
func NewTail(db journal.Querier, poll time.Duration, log *slog.Logger) *Tail {
	t := &Tail{db: db, poll: poll, log: log, watchers: map[string]map[*Watch]struct{}{}, done: make(chan struct{})}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t
}

// Watch is one watcher of a stream.
type Watch struct {
	// C receives after events of the stream commit; one value stands for
	// all that committed since the last was taken.
	C      <-chan struct{}
	c      chan struct{}
	stream string
	tail   *Tail
	once   sync.Once
}

// Watch starts watching stream: every event of it that commits from now
// on is told on the Watch's C. The caller reads what committed before
// once Watch returns; Close ends the watch.
func (t *Tail) Watch(ctx context.Context, stream string) (*Watch, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.armed {
		// The horizon is taken before the watcher reads what committed
		// before it, so nothing falls between the two.
		m, err := journal.Horizon(ctx, t.db)
		if err != nil {
			return nil, err
		}
		t.mark, t.armed = m, true
	}
	c := make(chan struct{}, 1)
	w := &Watch{C: c, c: c, stream: stream, tail: t}
	if t.watchers[stream] == nil {
		t.watchers[stream] = map[*Watch]struct{}{}
	}
	t.watchers[stream][w] = struct{}{}
	t.n++
	if !t.started {
		t.started = true
		go t.run()
	}
	return w, nil
}

// Close ends the watch. Safe to call twice.
func (w *Watch) Close() {
	w.once.Do(func() {
		t := w.tail
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.watchers[w.stream], w)
		if len(t.watchers[w.stream]) == 0 {
			delete(t.watchers, w.stream)
		}
		t.n--
	})
}

// Stop ends the reader and waits for it. Safe to call twice, and before
// any Watch.
func (t *Tail) Stop() {
	t.mu.Lock()
	started := t.started
	t.started = true // no reader starts after Stop
	t.mu.Unlock()
	t.cancel()
	if started {
		<-t.done
	}
}

// run reads the journal every poll while something watches, and tells
// the watchers of each stream read.
func (t *Tail) run() {
	defer close(t.done)
	tick := time.NewTicker(t.poll)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		t.mu.Lock()
		if t.n == 0 {
			t.armed = false
		}
		armed, mark := t.armed, t.mark
		t.mu.Unlock()
		for armed {
			streams, last, err := journal.ReadCommittedStreams(t.ctx, t.db, mark, tailBatch)
			if err != nil {
				if t.ctx.Err() == nil {
					// The next tick reads on from the same mark.
					t.log.Warn("feed tail: read journal", "err", err)
				}
				break
			}
			t.mu.Lock()
			for _, s := range streams {
				for w := range t.watchers[s] {
					select {
					case w.c <- struct{}{}:
					default: // told already, not yet taken
					}
				}
			}
			t.mark, mark = last, last
			t.mu.Unlock()
			if len(streams) < tailBatch {
				break
			}
		}
	}
}
