package lifecycle

import (
	"strings"
	"testing"
)

func TestDeriveStatus(t *testing.T) {
	const (
		q = StateQueued
		c = StateDelivering
		r = StateRetrying
		a = StateAwaitingAck
		d = StateDelivered
		f = StateFailed
		s = StateStalled
		b = StateBlocked
		k = StateSkipped
		w = StateScheduled
	)
	tests := []struct {
		name       string
		stage      MessageStage
		refusal    Refusal
		deliveries []DeliveryState
		want       MessageStatus
	}{
		{"accepted is received", StageAccepted, "", nil, StatusReceived},
		{"accepted ignores deliveries", StageAccepted, "", []DeliveryState{f}, StatusReceived},
		{"refused on merits", StageRefused, RefusalRejected, nil, StatusRefused},
		{"refused by our failure", StageRefused, RefusalInternal, nil, StatusError},
		{"dispatched to nobody", StageDispatched, "", nil, StatusNotRouted},
		{"queued", StageDispatched, "", []DeliveryState{q}, StatusInProgress},
		{"delivering", StageDispatched, "", []DeliveryState{c}, StatusInProgress},
		{"retrying", StageDispatched, "", []DeliveryState{r}, StatusRetrying},
		{"awaiting", StageDispatched, "", []DeliveryState{a}, StatusAwaitingReceipt},
		{"failed", StageDispatched, "", []DeliveryState{f}, StatusError},
		{"stalled", StageDispatched, "", []DeliveryState{s}, StatusStalled},
		{"delivered", StageDispatched, "", []DeliveryState{d, d}, StatusDelivered},
		{"retrying beats queued", StageDispatched, "", []DeliveryState{q, r}, StatusRetrying},
		{"retrying beats failed", StageDispatched, "", []DeliveryState{f, r}, StatusRetrying},
		{"queued beats awaiting", StageDispatched, "", []DeliveryState{a, q}, StatusInProgress},
		{"delivering beats failed", StageDispatched, "", []DeliveryState{f, c}, StatusInProgress},
		{"awaiting beats failed", StageDispatched, "", []DeliveryState{f, a}, StatusAwaitingReceipt},
		{"awaiting beats stalled", StageDispatched, "", []DeliveryState{s, a}, StatusAwaitingReceipt},
		{"failed beats stalled", StageDispatched, "", []DeliveryState{s, f}, StatusError},
		{"stalled beats delivered", StageDispatched, "", []DeliveryState{d, s}, StatusStalled},
		{"failed beats delivered", StageDispatched, "", []DeliveryState{d, f}, StatusError},
		{"blocked", StageDispatched, "", []DeliveryState{b}, StatusBlocked},
		{"in progress beats blocked", StageDispatched, "", []DeliveryState{b, q}, StatusInProgress},
		{"blocked beats awaiting", StageDispatched, "", []DeliveryState{a, b}, StatusBlocked},
		{"blocked beats failed", StageDispatched, "", []DeliveryState{f, b}, StatusBlocked},
		{"skipped", StageDispatched, "", []DeliveryState{k}, StatusSkipped},
		{"skipped beats delivered", StageDispatched, "", []DeliveryState{d, k}, StatusSkipped},
		{"stalled beats skipped", StageDispatched, "", []DeliveryState{k, s}, StatusStalled},
		{"failed beats skipped", StageDispatched, "", []DeliveryState{k, f}, StatusError},
		{"scheduled", StageDispatched, "", []DeliveryState{w, w}, StatusScheduled},
		{"accepted with a schedule is received", StageAccepted, "", []DeliveryState{w}, StatusReceived},
		{"in progress beats scheduled", StageDispatched, "", []DeliveryState{w, q}, StatusInProgress},
		{"retrying beats scheduled", StageDispatched, "", []DeliveryState{r, w}, StatusRetrying},
		{"scheduled beats blocked", StageDispatched, "", []DeliveryState{b, w}, StatusScheduled},
		{"scheduled beats failed", StageDispatched, "", []DeliveryState{f, w}, StatusScheduled},
		{"scheduled beats skipped", StageDispatched, "", []DeliveryState{k, w}, StatusScheduled},
		{"scheduled beats delivered", StageDispatched, "", []DeliveryState{d, w}, StatusScheduled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DeriveStatus(tt.stage, tt.refusal, tt.deliveries); got != tt.want {
				t.Errorf("DeriveStatus(%s, %q, %v) = %s, want %s", tt.stage, tt.refusal, tt.deliveries, got, tt.want)
			}
		})
	}
}

func TestVocabulary(t *testing.T) {
	for _, s := range DeliveryStates {
		if got, err := ParseDeliveryState(string(s)); err != nil || got != s {
			t.Errorf("ParseDeliveryState(%s) = %s, %v", s, got, err)
		}
		if s.Label() == string(s) {
			t.Errorf("%s has no label", s)
		}
	}
	for _, s := range MessageStatuses {
		if got, err := ParseMessageStatus(string(s)); err != nil || got != s {
			t.Errorf("ParseMessageStatus(%s) = %s, %v", s, got, err)
		}
	}
	if _, err := ParseDeliveryState("lost"); err == nil {
		t.Error("ParseDeliveryState accepted an unknown state")
	}
	final := map[DeliveryState]bool{StateDelivered: true, StateFailed: true, StateSkipped: true, StateSuperseded: true}
	for _, s := range DeliveryStates {
		if s.Final() != final[s] {
			t.Errorf("%s: Final %v", s, s.Final())
		}
	}
	settled := map[MessageStatus]bool{StatusDelivered: true, StatusNotRouted: true, StatusRefused: true, StatusError: true,
		StatusStalled: true, StatusSkipped: true}
	for _, s := range MessageStatuses {
		if s.Settled() != settled[s] {
			t.Errorf("%s: Settled %v", s, s.Settled())
		}
	}
}

func TestDispatchBackoff(t *testing.T) {
	var at, stalls int
	woken := []int{}
	for n := 1; n <= DefaultMaxDispatches; n++ {
		woken = append(woken, at)
		at += int(DispatchBackoff(n).Seconds())
	}
	stalls = at
	want := []int{0, 10, 40, 160, 760}
	for i := range want {
		if woken[i] != want[i] {
			t.Fatalf("woken at %v, want %v", woken, want)
		}
	}
	if stalls != 1360 {
		t.Errorf("stalls at %d s, want 1360", stalls)
	}
}

func TestOutcomeValidate(t *testing.T) {
	if err := Delivered("ok").Validate(); err != nil {
		t.Error(err)
	}
	if err := (Outcome{Kind: OutcomeAwaitingAck}).Validate(); err == nil {
		t.Error("awaiting_ack without a deadline validated")
	}
	if err := (Outcome{Kind: OutcomeRetry, Text: "busy"}).Validate(); err == nil {
		t.Error("retry without a time validated")
	}
	if err := Failed("").Validate(); err == nil {
		t.Error("failed without a reason validated")
	}
	if err := Gone("410 Gone").Validate(); err != nil {
		t.Error(err)
	}
	if err := (Outcome{Kind: OutcomeDelivered, Text: "200 OK", Gone: true}).Validate(); err == nil || !strings.Contains(err.Error(), "outcome.gone") {
		t.Errorf("delivered and gone: %v, want an error naming outcome.gone", err)
	}
}
