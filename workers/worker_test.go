package workers_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// skippingStore hands out its jobs through ClaimDue one call at a time, the
// way ClaimDue does when it skips rows that are locked for a moment: the
// first call comes back short though more is due.
type skippingStore struct {
	mu       sync.Mutex
	batches  [][]workers.Job[string]
	done     chan string
	claimDue int
	// follow names the job an outcome claims next, by work.
	follow map[string]string
	// asked is what each job's outcome asked to claim next, and outcomes
	// its outcome, by work.
	asked    map[string]workers.Next
	outcomes map[string]lifecycle.Outcome
}

func (s *skippingStore) Claim(context.Context, uuid.UUID) (workers.Job[string], error) {
	panic("no wake-ups in this test")
}

func (s *skippingStore) HeldUntil() time.Time { return time.Time{} }

func (s *skippingStore) ClaimDue(_ context.Context, n int) ([]workers.Job[string], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimDue++
	if len(s.batches) == 0 {
		return nil, nil
	}
	jobs := s.batches[0]
	s.batches = s.batches[1:]
	return jobs, nil
}

func (s *skippingStore) Complete(_ context.Context, job workers.Job[string], o lifecycle.Outcome, claim workers.Next) (*workers.Job[string], error) {
	s.mu.Lock()
	if s.asked == nil {
		s.asked, s.outcomes = map[string]workers.Next{}, map[string]lifecycle.Outcome{}
	}
	s.asked[job.Work], s.outcomes[job.Work] = claim, o
	s.mu.Unlock()
	s.done <- job.Work
	if next, ok := s.follow[job.Work]; ok {
		return &workers.Job[string]{ID: uuid.New(), Work: next}, nil
	}
	return nil, nil
}

func (s *skippingStore) Release(context.Context, workers.Job[string], bool, string) error { return nil }

type okDeliverer struct{}

func (okDeliverer) Deliver(context.Context, string) lifecycle.Outcome {
	return lifecycle.Delivered("ok")
}

// startSkipping starts a worker of maxConcurrent slots on the store,
// stopped when the test ends.
func startSkipping(t *testing.T, store *skippingStore, d workers.Deliverer[string], maxConcurrent int) {
	t.Helper()
	w, err := workers.NewWorker(workers.Config[string]{Base: service.Base{Logger: quiet}, Name: "test", Store: store, Deliverer: d,
		MaxConcurrent: maxConcurrent})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
}

// completed waits for the outcomes of the works named, in that order.
func (s *skippingStore) completed(t *testing.T, works ...string) {
	t.Helper()
	for _, want := range works {
		select {
		case got := <-s.done:
			if got != want {
				t.Fatalf("completed %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not completed", want)
		}
	}
}

// TestAnOutcomeHandsTheSlotToTheJobItClaimed: the job an outcome claimed
// runs next in the same slot, with no catch-up of its own.
func TestAnOutcomeHandsTheSlotToTheJobItClaimed(t *testing.T) {
	t.Parallel()
	store := &skippingStore{done: make(chan string, 3), batches: [][]workers.Job[string]{{{ID: uuid.New(), Work: "head"}}},
		follow: map[string]string{"head": "second", "second": "third"}}
	startSkipping(t, store, okDeliverer{}, 1)
	store.completed(t, "head", "second", "third")
}

// panicky panics at the attempt of its work "bad".
type panicky struct{}

func (panicky) Deliver(_ context.Context, work string) lifecycle.Outcome {
	if work == "bad" {
		panic("a bug")
	}
	return lifecycle.Delivered("ok")
}

// TestPanickingAttemptIsRetried: an attempt that panics is that attempt's
// outcome, a retry that names the panic; the worker goes on with the next.
func TestPanickingAttemptIsRetried(t *testing.T) {
	t.Parallel()
	store := &skippingStore{done: make(chan string, 2), batches: [][]workers.Job[string]{{{ID: uuid.New(), Work: "bad"}}},
		follow: map[string]string{"bad": "good"}}
	startSkipping(t, store, panicky{}, 1)
	store.completed(t, "bad", "good")
	store.mu.Lock()
	defer store.mu.Unlock()
	if o := store.outcomes["bad"]; o.Kind != lifecycle.OutcomeRetry || o.Text != "attempt panicked: a bug" {
		t.Errorf("the panicking attempt's outcome: %+v", o)
	}
	if o := store.outcomes["good"]; o.Kind != lifecycle.OutcomeDelivered {
		t.Errorf("the next attempt's outcome: %+v", o)
	}
}

// TestShortCatchUpRunsAgain: a catch-up that came back short but claimed
// something is followed by another, which takes what the first passed over,
// with no wake-up and no poke.
//
// It runs in a synctest bubble, whose clock moves only while every
// goroutine of the worker waits: that no catch-up follows the chain's end
// is seen by letting an hour pass at once.
func TestShortCatchUpRunsAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &skippingStore{done: make(chan string, 2), batches: [][]workers.Job[string]{
			{{ID: uuid.New(), Work: "first"}},
			{{ID: uuid.New(), Work: "skipped"}},
		}}
		startSkipping(t, store, okDeliverer{}, 4)
		store.completed(t, "first", "skipped")
		// The chain ends after six catch-ups in a row that claim nothing,
		// each waiting twice as long as the one before (20 ms to 640 ms).
		time.Sleep(time.Hour)
		store.mu.Lock()
		defer store.mu.Unlock()
		if store.claimDue != 2+1+6 {
			t.Errorf("ClaimDue called %d times, want 9", store.claimDue)
		}
	})
}

// heldDeliverer holds each attempt until the test lets its work go.
type heldDeliverer map[string]chan struct{}

func (d heldDeliverer) Deliver(_ context.Context, work string) lifecycle.Outcome {
	<-d[work]
	return lifecycle.Delivered("ok")
}

// TestABacklogAsksForTheNextDue: while the last catch-up claimed all it
// asked for, outcomes ask for the oldest due job next; the first that
// finds none ends it, and outcomes after ask only for the job they free.
func TestABacklogAsksForTheNextDue(t *testing.T) {
	t.Parallel()
	store := &skippingStore{done: make(chan string, 3), follow: map[string]string{"a": "c"},
		batches: [][]workers.Job[string]{{{ID: uuid.New(), Work: "a"}, {ID: uuid.New(), Work: "b"}}}}
	held := heldDeliverer{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	startSkipping(t, store, held, 2)
	// The catch-up claimed both it asked for: a backlog.
	close(held["a"])
	store.completed(t, "a") // claims c next, in a's slot
	close(held["b"])
	store.completed(t, "b") // finds none due: the backlog ends
	// b's slot goes back to the catch-up, which finds nothing due.
	testpoll.Until(t, "a catch-up after the backlog ended", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.claimDue >= 2
	})
	close(held["c"])
	store.completed(t, "c")
	store.mu.Lock()
	defer store.mu.Unlock()
	want := map[string]workers.Next{"a": workers.NextDue, "b": workers.NextDue, "c": workers.NextFreed}
	for work, next := range want {
		if store.asked[work] != next {
			t.Errorf("%s asked for %d, want %d", work, store.asked[work], next)
		}
	}
}

// failingClaimStore fails every wake-up's claim, as a claim that meets the
// database away does, and hands its job out through its second catch-up:
// the first is the worker's at its start.
type failingClaimStore struct {
	skippingStore
	catchUps chan int
}

func (s *failingClaimStore) Claim(context.Context, uuid.UUID) (workers.Job[string], error) {
	return workers.Job[string]{}, errors.New("claim refused")
}

func (s *failingClaimStore) ClaimDue(ctx context.Context, n int) ([]workers.Job[string], error) {
	jobs, err := s.skippingStore.ClaimDue(ctx, n)
	select {
	case s.catchUps <- len(jobs):
	default: // the test reads only the first
	}
	return jobs, err
}

// TestAFailedClaimIsCaughtUp: a wake-up whose claim fails leaves its job
// due; the worker's catch-up takes it at once, as after a dropped wake-up,
// rather than leave it to the sweep.
func TestAFailedClaimIsCaughtUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store := &failingClaimStore{catchUps: make(chan int, 1),
		skippingStore: skippingStore{done: make(chan string, 1), batches: [][]workers.Job[string]{nil, {{ID: uuid.New(), Work: "due"}}}}}
	w, err := workers.NewWorker(workers.Config[string]{Base: service.Base{Logger: quiet}, Name: "test", Store: store,
		Deliverer: okDeliverer{}, NATS: b.nc, Subject: workers.DeliverySubject("test"), MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	if n := <-store.catchUps; n != 0 {
		t.Fatalf("the catch-up at start claimed %d", n)
	}
	if err := b.nc.Publish(workers.DeliverySubject("test"), []byte(uuid.NewString())); err != nil {
		t.Fatal(err)
	}
	store.completed(t, "due")
}
