package alerts_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// story folds a message's events one by one, as the commands record them.
type story struct {
	t      *testing.T
	m      *projection.Message
	at     time.Time
	ids    map[string]uuid.UUID // delivery id by target
	tokens map[string]uuid.UUID // claim token by target
	before *projection.Message
	last   journal.Event
	// steps holds every event with the states before and after it.
	steps []step
}

type step struct {
	e             journal.Event
	before, after *projection.Message
}

func newStory(t *testing.T) *story {
	s := &story{t: t, m: &projection.Message{}, at: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC),
		ids: map[string]uuid.UUID{}, tokens: map[string]uuid.UUID{}}
	s.record(journal.Event{Stream: journal.MessageStream(uuid.New()), Actor: journal.SourceActor("erp"),
		Payload: &journal.MessageAccepted{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain",
			PayloadSHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}})
	return s
}

func (s *story) record(e journal.Event) *story {
	s.t.Helper()
	s.at = s.at.Add(10 * time.Second)
	e.RecordedAt = s.at
	s.before = s.m.Clone()
	var err error
	if s.last, err = projection.Record(s.m, e); err != nil {
		s.t.Fatalf("record %s: %v", e.Kind(), err)
	}
	s.last.Position = int64(s.last.Version) + 100
	s.steps = append(s.steps, step{s.last, s.before, s.m.Clone()})
	return s
}

func (s *story) dispatch(targets ...string) *story {
	p := &journal.MessageDispatched{}
	for i, name := range targets {
		s.ids[name] = uuid.New()
		p.Deliveries = append(p.Deliveries, journal.NewDelivery{ID: s.ids[name], Seq: i + 1, Target: name})
	}
	if len(targets) > 0 {
		p.NextDue = s.at.Add(10 * time.Second)
	}
	return s.record(journal.Event{Actor: "system", Payload: p})
}

func (s *story) refuse(r lifecycle.Refusal) *story {
	return s.record(journal.Event{Actor: "system", Payload: &journal.MessageRefused{Refusal: r, Reason: "bad input"}})
}

func (s *story) claim(target string) *story {
	s.tokens[target] = uuid.New()
	d := s.m.Delivery(s.ids[target])
	return s.record(journal.Event{DeliveryID: s.ids[target], Actor: journal.WorkerActor(target),
		Payload: &journal.DeliveryClaimed{Token: s.tokens[target], Attempt: d.Attempts + 1, LeaseEnd: s.at.Add(time.Hour)}})
}

func (s *story) attempt(target string, o lifecycle.Outcome) *story {
	d := s.m.Delivery(s.ids[target])
	return s.record(journal.Event{DeliveryID: s.ids[target], Actor: journal.WorkerActor(target),
		Payload: &journal.DeliveryAttempted{Token: s.tokens[target], Attempt: d.Attempts, Outcome: o}})
}

func (s *story) stall(target string) *story {
	d := s.m.Delivery(s.ids[target])
	return s.record(journal.Event{DeliveryID: s.ids[target], Actor: journal.ActorSweep,
		Payload: &journal.DeliveryStalled{WakeUps: d.DispatchCount, Reason: "not claimed"}})
}

func (s *story) refusedReceipt(target string) *story {
	return s.record(journal.Event{DeliveryID: s.ids[target], Actor: journal.ActorSweep,
		Payload: &journal.ReceiptRefused{Positive: true, Reason: "not awaited"}})
}

func (s *story) derive() []alerts.Alert { return alerts.Derive(s.last, s.before, s.m) }

func TestDerive(t *testing.T) {
	failed := lifecycle.Failed("410 Gone")
	tests := []struct {
		name  string
		story func(*story) *story
		want  []alerts.Code
	}{
		{"accepted", func(s *story) *story { return s }, nil},
		{"dispatched", func(s *story) *story { return s.dispatch("alpha") }, nil},
		{"dispatched to nobody", func(s *story) *story { return s.dispatch() },
			[]alerts.Code{alerts.CodeMessageNotRouted}},
		{"refused, rejected", func(s *story) *story { return s.refuse(lifecycle.RefusalRejected) }, nil},
		{"refused, internal", func(s *story) *story { return s.refuse(lifecycle.RefusalInternal) },
			[]alerts.Code{alerts.CodeMessageFailed}},
		{"claimed", func(s *story) *story { return s.dispatch("alpha").claim("alpha") }, nil},
		{"the only delivery fails", func(s *story) *story { return s.dispatch("alpha").claim("alpha").attempt("alpha", failed) },
			[]alerts.Code{alerts.CodeMessageFailed}},
		{"a delivery fails beside a queued one", func(s *story) *story {
			return s.dispatch("alpha", "beta").claim("alpha").attempt("alpha", failed)
		}, nil},
		{"the other is delivered after a failure", func(s *story) *story {
			return s.dispatch("alpha", "beta").claim("alpha").attempt("alpha", failed).
				claim("beta").attempt("beta", lifecycle.Delivered("200"))
		}, []alerts.Code{alerts.CodeMessageFailed}},
		{"stalled", func(s *story) *story { return s.dispatch("alpha").stall("alpha") },
			[]alerts.Code{alerts.CodeDeliveryStalled}},
		{"the other stalls after a failure", func(s *story) *story {
			return s.dispatch("alpha", "beta").claim("alpha").attempt("alpha", failed).stall("beta")
		}, []alerts.Code{alerts.CodeDeliveryStalled, alerts.CodeMessageFailed}},
		{"in error already", func(s *story) *story {
			return s.dispatch("alpha").claim("alpha").attempt("alpha", failed).refusedReceipt("alpha")
		}, nil},
		{"both delivered", func(s *story) *story {
			return s.dispatch("alpha", "beta").claim("alpha").attempt("alpha", lifecycle.Delivered("200")).
				claim("beta").attempt("beta", lifecycle.Delivered("200"))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []alerts.Code
			s := tt.story(newStory(t))
			for _, a := range s.derive() {
				got = append(got, a.Code)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("codes %v, want %v", got, tt.want)
			}
			if len(got) > 0 && !alerts.MayRaise(s.last) {
				t.Errorf("MayRaise is false for %s, which raised %v", s.last.Kind(), got)
			}
			checkNeedsFailure(t, s)
		})
	}
}

// checkNeedsFailure checks, at every event of the story, what the
// alerter's probe of the journal relies on: an event NeedsFailure names
// may raise (MayRaise), and raises nothing unless an earlier event of the
// stream moved a delivery to a state giving status error.
func checkNeedsFailure(t *testing.T, s *story) {
	t.Helper()
	failure := false
	for _, st := range s.steps {
		if alerts.NeedsFailure(st.e) {
			if !alerts.MayRaise(st.e) {
				t.Errorf("%s v%d: NeedsFailure but not MayRaise", st.e.Kind(), st.e.Version)
			}
			if got := alerts.Derive(st.e, st.before, st.after); !failure && len(got) > 0 {
				t.Errorf("%s v%d raises %v with no failure before it", st.e.Kind(), st.e.Version, got)
			}
		}
		failure = failure || slices.Contains(lifecycle.StatesGiving(lifecycle.StatusError), st.e.NewState)
	}
}

func TestDeriveFields(t *testing.T) {
	s := newStory(t).dispatch("alpha").stall("alpha")
	got := s.derive()[0]
	d := s.ids["alpha"]
	want := alerts.Alert{ID: "delivery_stalled:" + d.String(), Code: alerts.CodeDeliveryStalled,
		Severity: alerts.SeverityCritical, Key: "delivery_stalled:alpha", MessageID: s.m.ID, DeliveryID: d,
		Position: s.last.Position, RaisedAt: s.last.RecordedAt}
	details := got.Details
	got.Details, got.Summary = nil, ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stalled:\n got %+v\nwant %+v", got, want)
	}
	if details["target"] != "alpha" || details["wake_ups"] != 1 || details["from"] != "acme" || details["to"] != "globex" {
		t.Errorf("stalled details %v", details)
	}

	s = newStory(t).dispatch()
	if a := s.derive()[0]; a.ID != "message_not_routed:"+s.m.ID.String() || a.Severity != alerts.SeverityWarning ||
		a.Key != "message_not_routed:erp" {
		t.Errorf("not routed: %+v", a)
	}

	s = newStory(t).refuse(lifecycle.RefusalInternal)
	if a := s.derive()[0]; a.ID != "message_failed:"+s.m.ID.String()+":2" || a.Severity != alerts.SeverityError ||
		a.Key != "message_failed:erp" || a.Details["error"] != "bad input" {
		t.Errorf("failed: %+v", a)
	}

	// A target disabled raises from its event alone, once per event.
	message, delivery := uuid.New(), uuid.New()
	e := journal.Event{Position: 42, RecordedAt: s.at, Stream: journal.ConfigStream, Version: 7, Actor: journal.WorkerActor("alpha"),
		Payload: &journal.TargetDisabled{Target: "alpha", Reason: journal.DisabledGone, MessageID: message, DeliveryID: delivery, StatusCode: 410}}
	if !alerts.MayRaise(e) || alerts.NeedsFailure(e) {
		t.Errorf("target.disabled: MayRaise %v, NeedsFailure %v", alerts.MayRaise(e), alerts.NeedsFailure(e))
	}
	all := alerts.Derive(e, nil, nil)
	if len(all) != 1 {
		t.Fatalf("target.disabled raised %v", all)
	}
	got = all[0]
	details = got.Details
	got.Details, got.Summary = nil, ""
	want = alerts.Alert{ID: "target_disabled:alpha:7", Code: alerts.CodeTargetDisabled, Severity: alerts.SeverityCritical,
		Key: "target_disabled:alpha", MessageID: message, DeliveryID: delivery, Position: 42, RaisedAt: s.at}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("target disabled:\n got %+v\nwant %+v", got, want)
	}
	if details["target"] != "alpha" || details["reason"] != "gone" || details["status_code"] != 410 {
		t.Errorf("target disabled details %v", details)
	}

	// A breaker opened from closed raises target_unhealthy once per
	// event; opened again by a failed probe, nothing: the episode goes on.
	opened := &journal.BreakerOpened{Target: "alpha", Requests: 10, Failures: 6, Window: lifecycle.Duration(time.Minute),
		Cooldown: lifecycle.Duration(30 * time.Second), Until: s.at.Add(30 * time.Second)}
	e = journal.Event{Position: 50, RecordedAt: s.at, Stream: journal.TargetStream("alpha"), Version: 3, Actor: journal.WorkerActor("alpha"),
		Payload: opened}
	if !alerts.MayRaise(e) || alerts.NeedsFailure(e) {
		t.Errorf("target.breaker_opened: MayRaise %v, NeedsFailure %v", alerts.MayRaise(e), alerts.NeedsFailure(e))
	}
	if all = alerts.Derive(e, nil, nil); len(all) != 1 || all[0].ID != "target_unhealthy:alpha:3" || all[0].Code != alerts.CodeTargetUnhealthy ||
		all[0].Key != "target_unhealthy:alpha" || all[0].Details["failures"] != 6 {
		t.Errorf("breaker opened raised %+v", all)
	}
	e.Payload = &journal.BreakerOpened{Target: "alpha", Window: opened.Window, Cooldown: opened.Cooldown, Until: opened.Until, Probe: true}
	if alerts.MayRaise(e) || len(alerts.Derive(e, nil, nil)) != 0 {
		t.Errorf("a failed probe raised an alert")
	}
}

// TestRememberedFoldsMatchTheStream folds two interleaved stories event by
// event on the alerter's remembered states: each event gets the states the
// stream's own fold gives, and an event seen again, a stream not seen from
// its start or a settled message's next event is left to the read of the
// stream.
func TestRememberedFoldsMatchTheStream(t *testing.T) {
	failed := lifecycle.Failed("410 Gone")
	a := newStory(t).dispatch("alpha", "beta").claim("alpha").attempt("alpha", failed).
		claim("beta").attempt("beta", lifecycle.Delivered("200"))
	b := newStory(t).dispatch("alpha").stall("alpha")
	r := alerts.Remembering()
	check := func(st step) {
		t.Helper()
		before, after := r.Next(st.e)
		if !reflect.DeepEqual(before, st.before) || !reflect.DeepEqual(after, st.after) {
			t.Fatalf("%s v%d: before %+v after %+v, want %+v and %+v", st.e.Kind(), st.e.Version, before, after, st.before, st.after)
		}
	}
	for i := range max(len(a.steps), len(b.steps)) {
		for _, s := range []*story{a, b} {
			if i < len(s.steps) {
				check(s.steps[i])
				// A settled message is forgotten: what may follow waits
				// for an operator, and is read from the stream then.
				st := s.steps[i]
				if remembered := r.Remembers(st.e.Stream); remembered == st.after.Status.Settled() {
					t.Errorf("%s v%d, status %s: remembered %t", st.e.Kind(), st.e.Version, st.after.Status, remembered)
				}
			}
		}
	}
	if before, after := r.Next(a.steps[len(a.steps)-1].e); before != nil || after != nil {
		t.Errorf("an event seen again: %+v, %+v", before, after)
	}
	if before, after := alerts.Remembering().Next(b.steps[1].e); before != nil || after != nil {
		t.Errorf("a stream not seen from its start: %+v, %+v", before, after)
	}
}

// TestFailingCallbackRaisesNothing: the calls of a message's outcome
// callback, failed ones included, change no status and raise no alert.
func TestFailingCallbackRaisesNothing(t *testing.T) {
	s := &story{t: t, m: &projection.Message{}, at: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC),
		ids: map[string]uuid.UUID{}, tokens: map[string]uuid.UUID{}}
	s.record(journal.Event{Stream: journal.MessageStream(uuid.New()), Actor: journal.SourceActor("erp"),
		Payload: &journal.MessageAccepted{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain",
			PayloadSHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", CallbackURL: "http://erp.example/cb"}})
	s.dispatch("alpha").claim("alpha").attempt("alpha", lifecycle.Delivered("200"))
	for attempt := 1; attempt <= 3; attempt++ {
		token := uuid.New()
		s.record(journal.Event{Actor: journal.ActorCallbacks, Payload: &journal.CallbackClaimed{Seq: 1, Token: token,
			Attempt: attempt, LeaseEnd: s.at.Add(time.Hour)}})
		if a := s.derive(); len(a) > 0 || alerts.MayRaise(s.last) {
			t.Fatalf("a callback's claim raises %v", a)
		}
		o := lifecycle.Retry(s.at.Add(time.Second), "503")
		if attempt == 3 {
			o = lifecycle.Failed("503; gave up")
		}
		s.record(journal.Event{Actor: journal.ActorCallbacks, Payload: &journal.CallbackAttempted{Seq: 1, Token: token,
			Attempt: attempt, Outcome: o}})
		if a := s.derive(); len(a) > 0 || alerts.MayRaise(s.last) {
			t.Fatalf("a callback's outcome raises %v", a)
		}
	}
	if s.m.Status != lifecycle.StatusDelivered || s.m.Callback.State != lifecycle.StateFailed {
		t.Fatalf("status %s, callback %s", s.m.Status, s.m.Callback.State)
	}
}
