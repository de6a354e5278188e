package alerts

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// Code names a kind of alert; it is the last token of the alert's NATS
// subject.
type Code string

// The alert codes.
const (
	// CodeDeliveryStalled: a delivery used up its wake-ups unclaimed.
	CodeDeliveryStalled Code = "delivery_stalled"
	// CodeMessageNotRouted: a message was dispatched and matched no route.
	CodeMessageNotRouted Code = "message_not_routed"
	// CodeMessageFailed: a message's status became error.
	CodeMessageFailed Code = "message_failed"
	// CodeLaneBlocked: the head of a lane kept deliveries waiting behind
	// it for longer than its target's head_alert_after.
	CodeLaneBlocked Code = "lane_blocked"
	// CodeTargetDisabled: a target was disabled by what its receiver
	// answered (target.disabled); it claims nothing until an operator
	// enables it again.
	CodeTargetDisabled Code = "target_disabled"
	// CodeTargetUnhealthy: a target's breaker opened from closed
	// (target.breaker_opened); its attempts are held until it closes.
	CodeTargetUnhealthy Code = "target_unhealthy"
)

// Codes lists every code, for metrics that show each from the start.
var Codes = []Code{CodeDeliveryStalled, CodeMessageNotRouted, CodeMessageFailed, CodeLaneBlocked, CodeTargetDisabled,
	CodeTargetUnhealthy}

// Severity says how urgent an alert is.
type Severity string

// The severities in use.
const (
	SeverityCritical Severity = "critical"
	SeverityError    Severity = "error"
	SeverityWarning  Severity = "warning"
)

// Alert is one alert, as stored and as sent (JSON).
type Alert struct {
	// ID is stable: the same events always give the same id, so recording
	// an alert twice is a no-op and receivers can drop repeats by it.
	ID       string   `json:"id"`
	Code     Code     `json:"code"`
	Severity Severity `json:"severity"`
	// Key groups alerts of one cause for the receiver, such as every stall
	// at one target.
	Key        string    `json:"key"`
	Summary    string    `json:"summary"`
	MessageID  uuid.UUID `json:"message_id,omitzero"`
	DeliveryID uuid.UUID `json:"delivery_id,omitzero"`
	// Position is the journal position of the event that raised the alert.
	Position int64 `json:"position"`
	// RaisedAt is that event's recorded_at.
	RaisedAt time.Time      `json:"raised_at"`
	Details  map[string]any `json:"details"`
	// Truncated marks a copy published on NATS with its summary and the
	// texts of its details cut (each ending in lifecycle.CutMark) to fit
	// the connection's max payload; the stored alert and the webhook's
	// copy are whole.
	Truncated bool `json:"truncated,omitempty"`
}

// Derive is the alert rule: the alerts event e raises, given the state of its
// message before e and after it (projection.Apply); for an event of the
// config stream, which belongs to no message, before and after are nil. It
// reads nothing else, so replaying the journal derives the same alerts
// with the same ids.
//
//   - target.disabled raises target_disabled, critical, once per event
//     (the id has the config stream's version): once per time the target
//     is disabled, however many answers said so.
//   - target.breaker_opened from closed (not a failed probe's) raises
//     target_unhealthy, an error, once per event (the id has the health
//     stream's version): once per episode, until the breaker closes.
//   - delivery.stalled raises delivery_stalled. Its id is the delivery's,
//     so a delivery that stalls again after a claim or a redelivery has
//     raised it already.
//   - message.dispatched with no delivery raises message_not_routed.
//   - delivery.lane_held raises lane_blocked, a warning, once per head
//     delivery (the id is the delivery's).
//   - any event that turns the message's status into error raises
//     message_failed, with an id per turn (the event's version): a failed
//     delivery, the last busy delivery settling beside a failed one, a
//     refusal of class internal. A refusal of class rejected gives status
//     refused and raises nothing.
func Derive(e journal.Event, before, after *projection.Message) []Alert {
	if p, ok := e.Payload.(*journal.TargetDisabled); ok {
		details := map[string]any{"target": p.Target, "reason": p.Reason, "status_code": p.StatusCode}
		if p.Reason == journal.DisabledFailing {
			details = map[string]any{"target": p.Target, "reason": p.Reason, "failing_since": p.FailingSince}
		}
		return []Alert{{ID: fmt.Sprintf("%s:%s:%d", CodeTargetDisabled, p.Target, e.Version), Code: CodeTargetDisabled,
			Severity: SeverityCritical, Key: fmt.Sprintf("%s:%s", CodeTargetDisabled, p.Target),
			Summary:   p.Text() + "; it claims nothing until an operator enables it again",
			MessageID: p.MessageID, DeliveryID: p.DeliveryID, Position: e.Position, RaisedAt: e.RecordedAt,
			Details: details}}
	}
	if p, ok := e.Payload.(*journal.BreakerOpened); ok {
		if p.Probe {
			return nil // the same episode: the breaker has not closed since
		}
		return []Alert{{ID: fmt.Sprintf("%s:%s:%d", CodeTargetUnhealthy, p.Target, e.Version), Code: CodeTargetUnhealthy,
			Severity: SeverityError, Key: fmt.Sprintf("%s:%s", CodeTargetUnhealthy, p.Target),
			Summary: fmt.Sprintf("target %s unhealthy: %d of %s failed within %s; its breaker holds every attempt until it closes",
				p.Target, p.Failures, lifecycle.Count(p.Requests, "attempt", "attempts"), p.Window),
			Position: e.Position, RaisedAt: e.RecordedAt,
			Details: map[string]any{"target": p.Target, "requests": p.Requests, "failures": p.Failures, "window": p.Window.String(),
				"until": p.Until}}}
	}
	var out []Alert
	base := func(code Code, sev Severity, id, key, summary string, details map[string]any) Alert {
		return Alert{ID: id, Code: code, Severity: sev, Key: key, Summary: summary, MessageID: after.ID,
			Position: e.Position, RaisedAt: e.RecordedAt, Details: details}
	}
	switch p := e.Payload.(type) {
	case *journal.DeliveryStalled:
		a := base(CodeDeliveryStalled, SeverityCritical,
			fmt.Sprintf("%s:%s", CodeDeliveryStalled, e.DeliveryID),
			fmt.Sprintf("%s:%s", CodeDeliveryStalled, e.Target),
			fmt.Sprintf("delivery to %s stalled: %s", e.Target, p.Reason),
			map[string]any{"target": e.Target, "wake_ups": p.WakeUps, "from": after.From, "to": after.To})
		a.DeliveryID = e.DeliveryID
		out = append(out, a)
	case *journal.DeliveryLaneHeld:
		d := after.Delivery(e.DeliveryID)
		a := base(CodeLaneBlocked, SeverityWarning,
			fmt.Sprintf("%s:%s", CodeLaneBlocked, e.DeliveryID),
			fmt.Sprintf("%s:%s", CodeLaneBlocked, e.Target),
			fmt.Sprintf("lane %q of %s is held by delivery %s: %d waiting since %s", d.LaneKey, e.Target, e.DeliveryID,
				p.Waiting, p.Since.UTC().Format(time.RFC3339)),
			map[string]any{"target": e.Target, "ordering_key": d.LaneKey, "head_delivery_id": e.DeliveryID.String(),
				"head_state": string(d.State), "waiting": p.Waiting, "waiting_since": p.Since})
		a.DeliveryID = e.DeliveryID
		out = append(out, a)
	case *journal.MessageDispatched:
		if len(p.Deliveries) == 0 {
			out = append(out, base(CodeMessageNotRouted, SeverityWarning,
				fmt.Sprintf("%s:%s", CodeMessageNotRouted, after.ID),
				fmt.Sprintf("%s:%s", CodeMessageNotRouted, after.Source),
				fmt.Sprintf("message from %s to %s (source %s) matched no route", after.From, after.To, after.Source),
				map[string]any{"source": after.Source, "from": after.From, "to": after.To}))
		}
	}
	if before.Status != lifecycle.StatusError && after.Status == lifecycle.StatusError {
		out = append(out, base(CodeMessageFailed, SeverityError,
			fmt.Sprintf("%s:%s:%d", CodeMessageFailed, after.ID, e.Version),
			fmt.Sprintf("%s:%s", CodeMessageFailed, after.Source),
			fmt.Sprintf("message from %s to %s (source %s) failed: %s", after.From, after.To, after.Source, after.Error),
			map[string]any{"source": after.Source, "from": after.From, "to": after.To, "error": after.Error}))
	}
	return out
}

// MayRaise reports whether Derive can raise an alert for e, so the alerter
// folds the message's stream only for the events that can: a refusal, a
// dispatch that routes the message nowhere, a stall, a target disabled
// (which needs no fold), and a delivery event
// that can turn the status into error by the lifecycle's ranking
// (lifecycle.MayBecome).
func MayRaise(e journal.Event) bool {
	switch p := e.Payload.(type) {
	case *journal.MessageDispatched:
		return len(p.Deliveries) == 0
	case *journal.MessageRefused:
		return true
	case *journal.DeliveryStalled, *journal.DeliveryLaneHeld, *journal.TargetDisabled:
		return true
	case *journal.BreakerOpened:
		return !p.Probe
	}
	return e.Kind().Delivery() && lifecycle.MayBecome(e.OldState, e.NewState, lifecycle.StatusError)
}

// NeedsFailure reports whether e, for which MayRaise holds, can raise an
// alert only if its message holds a delivery in a state giving status
// error already (lifecycle.StatesGiving): a delivery's outcome that gives
// no such state itself, such as the delivery of one of two targets. A
// delivery enters such a state only by an event that records it as its
// new state, so a stream with no such event before e raises nothing at e:
// the alerter asks the journal's index of them (journal.FailedBefore)
// instead of folding the stream.
func NeedsFailure(e journal.Event) bool {
	switch e.Payload.(type) {
	case *journal.DeliveryStalled, *journal.DeliveryLaneHeld:
		return false
	}
	return e.Kind().Delivery() && MayRaise(e) && !slices.Contains(failureStates, e.NewState)
}

// failureStates are the delivery states giving status error.
var failureStates = lifecycle.StatesGiving(lifecycle.StatusError)
