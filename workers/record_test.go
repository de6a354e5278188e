package workers_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// flakyStore hands out its jobs through ClaimDue, one batch per call, and
// fails their recordings as the test says.
type flakyStore struct {
	mu      sync.Mutex
	batches [][]workers.Job[string]
	// fail is the error of a job's n-th recording (from 1); nil records it.
	fail  func(work string, n int) error
	tries map[string]int
	// recorded gets the work of each job recorded, with "released " in
	// front for a release.
	recorded chan string
}

func newFlakyStore(fail func(work string, n int) error, batches ...[]workers.Job[string]) *flakyStore {
	return &flakyStore{batches: batches, fail: fail, tries: map[string]int{}, recorded: make(chan string, 10)}
}

func (s *flakyStore) Claim(context.Context, uuid.UUID) (workers.Job[string], error) {
	panic("no wake-ups in this test")
}

func (s *flakyStore) HeldUntil() time.Time { return time.Time{} }

func (s *flakyStore) ClaimDue(context.Context, int) ([]workers.Job[string], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.batches) == 0 {
		return nil, nil
	}
	jobs := s.batches[0]
	s.batches = s.batches[1:]
	return jobs, nil
}

// record takes the time of a round trip, which a cancelled context cuts
// short, as the database's does.
func (s *flakyStore) record(ctx context.Context, work, as string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Millisecond):
	}
	s.mu.Lock()
	s.tries[work]++
	err := s.fail(work, s.tries[work])
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.recorded <- as
	return nil
}

func (s *flakyStore) Complete(ctx context.Context, job workers.Job[string], _ lifecycle.Outcome, _ workers.Next) (*workers.Job[string], error) {
	return nil, s.record(ctx, job.Work, job.Work)
}

func (s *flakyStore) Release(ctx context.Context, job workers.Job[string], _ bool, _ string) error {
	return s.record(ctx, job.Work, "released "+job.Work)
}

func (s *flakyStore) triesOf(work string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries[work]
}

// errAway is what a recording gets while the database is away.
var errAway = fmt.Errorf("complete delivery: %w", &pgconn.PgError{Code: "57P01"})

func (s *flakyStore) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-s.recorded:
		if got != want {
			t.Fatalf("recorded %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%q not recorded", want)
	}
}

// startWorker starts a worker of one slot on the store, stopped when the test
// ends.
func startWorker(t *testing.T, store workers.Store[string], d workers.Deliverer[string], clock *testclock.Clock, grace time.Duration) *workers.Worker[string] {
	t.Helper()
	w, err := workers.NewWorker(workers.Config[string]{Base: service.Base{Now: clock.Now, Logger: quiet}, Name: "test", Store: store, Deliverer: d,
		MaxConcurrent: 1, DrainGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return w
}

func job(work string, leaseEnd time.Time) workers.Job[string] {
	return workers.Job[string]{ID: uuid.New(), Token: uuid.New(), LeaseEnd: leaseEnd, Work: work}
}

// TestOutcomeRecordedOnceTheDatabaseIsBack: an outcome whose recording
// fails for a reason that can pass is tried again until it is recorded.
func TestOutcomeRecordedOnceTheDatabaseIsBack(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	store := newFlakyStore(func(_ string, n int) error {
		if n <= 3 {
			return errAway
		}
		return nil
	}, []workers.Job[string]{job("a", clock.Now().Add(time.Minute))})
	startWorker(t, store, okDeliverer{}, clock, time.Second)
	store.expect(t, "a")
	if n := store.triesOf("a"); n != 4 {
		t.Errorf("%d tries, want 4", n)
	}
}

// TestRecordingEndsForGood: a refusal, a lost claim, or the end of the
// lease ends the tries; the slot is then free for the next job.
func TestRecordingEndsForGood(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		// leaseEnds is set when only the end of the lease stops the tries.
		leaseEnds bool
	}{
		{"claim lost", &commands.StateError{Err: commands.ErrClaimLost}, false},
		{"refused", &pgconn.PgError{Code: "42601"}, false},
		{"invalid", commands.ErrInvalid, false},
		{"lease ended", errAway, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clock := testclock.New(time.Now())
			store := newFlakyStore(func(work string, _ int) error {
				if work == "first" {
					return c.err
				}
				return nil
			}, []workers.Job[string]{job("first", clock.Now().Add(time.Minute))},
				[]workers.Job[string]{job("next", clock.Now().Add(time.Minute))})
			startWorker(t, store, okDeliverer{}, clock, time.Second)
			if c.leaseEnds {
				testpoll.Until(t, "a second try", func() bool { return store.triesOf("first") >= 2 })
				clock.Advance(time.Minute)
			}
			// One slot: the next job runs once the first gave up.
			store.expect(t, "next")
			n := store.triesOf("first")
			if !c.leaseEnds && n != 1 {
				t.Errorf("%d tries, want 1", n)
			}
		})
	}
}

// blockingDeliverer's attempts last until the worker stops.
type blockingDeliverer struct{ started chan struct{} }

func (d blockingDeliverer) Deliver(ctx context.Context, _ string) lifecycle.Outcome {
	d.started <- struct{}{}
	<-ctx.Done()
	return lifecycle.Retry(time.Now(), "cut short")
}

// TestStopWaitsForRecordings: a stop lets an outcome that is being tried
// again be recorded within the drain grace, and a release made after the
// grace be tried again too; a stop whose context ends gives up on them.
func TestStopWaitsForRecordings(t *testing.T) {
	t.Parallel()
	twice := func(_ string, n int) error {
		if n <= 2 {
			return errAway
		}
		return nil
	}
	t.Run("outcome", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(time.Now())
		store := newFlakyStore(twice, []workers.Job[string]{job("a", clock.Now().Add(time.Minute))})
		w := startWorker(t, store, okDeliverer{}, clock, time.Minute)
		testpoll.Until(t, "a first try", func() bool { return store.triesOf("a") >= 1 })
		w.Stop(context.Background())
		store.expect(t, "a")
	})
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(time.Now())
		store := newFlakyStore(twice, []workers.Job[string]{job("a", clock.Now().Add(time.Minute))})
		d := blockingDeliverer{started: make(chan struct{}, 1)}
		w := startWorker(t, store, d, clock, 10*time.Millisecond)
		<-d.started
		w.Stop(context.Background())
		store.expect(t, "released a")
		if n := store.triesOf("a"); n != 3 {
			t.Errorf("%d tries, want 3", n)
		}
	})
	t.Run("given up", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(time.Now())
		store := newFlakyStore(func(string, int) error { return errAway },
			[]workers.Job[string]{job("a", clock.Now().Add(time.Minute))})
		w := startWorker(t, store, okDeliverer{}, clock, time.Minute)
		testpoll.Until(t, "a second try", func() bool { return store.triesOf("a") >= 2 })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// Stop returns without waiting for the lease or the grace.
		w.Stop(ctx)
	})
}

// goroutineDeliverer delivers every job and sends the id of the goroutine
// that attempted it.
type goroutineDeliverer struct{ ids chan string }

func (d goroutineDeliverer) Deliver(context.Context, string) lifecycle.Outcome {
	d.ids <- goroutineID()
	return lifecycle.Delivered("ok")
}

// goroutineID is the calling goroutine's id, from the first line of its
// stack ("goroutine 7 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// goroutineState is the state of the goroutine of that id as the whole
// stack dump shows it ("running", "select", "select, 2 minutes"), "" when
// it has ended.
func goroutineState(id string) string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	_, rest, ok := strings.Cut(string(buf), "goroutine "+id+" [")
	if !ok {
		return ""
	}
	state, _, _ := strings.Cut(rest, "]")
	return state
}

// TestJobsRunOnTheWorkersGoroutines: a job claimed once the last one has
// run runs on the goroutine that ran it, and that goroutine ends once the
// worker has stopped.
func TestJobsRunOnTheWorkersGoroutines(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	store := newFlakyStore(func(string, int) error { return nil }, []workers.Job[string]{job("a", clock.Now().Add(time.Minute))})
	d := goroutineDeliverer{ids: make(chan string, 2)}
	w := startWorker(t, store, d, clock, time.Second)
	store.expect(t, "a")
	first := <-d.ids
	// The goroutine waits for the next job once it has recorded a's outcome.
	testpoll.Until(t, "a's goroutine waiting", func() bool { return strings.HasPrefix(goroutineState(first), "select") })
	store.mu.Lock()
	store.batches = append(store.batches, []workers.Job[string]{job("b", clock.Now().Add(time.Minute))})
	store.mu.Unlock()
	w.Poke()
	store.expect(t, "b")
	if second := <-d.ids; second != first {
		t.Fatalf("b ran on goroutine %s, a on %s: want the same", second, first)
	}
	w.Stop(t.Context())
	testpoll.Until(t, "the worker's goroutine ended", func() bool { return goroutineState(first) == "" })
}

// TestReleaseAfterTheStopGaveUp: a job claimed for a slot an ingest held
// (reserve), whose claim commits only once Stop has given up on the
// recordings, is still released, by a try of its own, rather than left
// to its lease.
func TestReleaseAfterTheStopGaveUp(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	store := newFlakyStore(func(string, int) error { return nil })
	w := startWorker(t, store, okDeliverer{}, clock, time.Millisecond)
	if !w.Reserve() {
		t.Fatal("no slot to reserve")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := make(chan struct{})
	go func() {
		w.Stop(ctx)
		close(stopped)
	}()
	// Stop waits for the slot held, having given up on recordings at once.
	testpoll.Until(t, "the stop to give up on recordings", w.GaveUp)
	w.RunReserved(job("late", clock.Now().Add(time.Minute)))
	store.expect(t, "released late")
	<-stopped
}
