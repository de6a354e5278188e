package lifecycle

import "slices"

// DeliveryState is where one delivery of a message to one target is.
type DeliveryState string

// The delivery states.
const (
	// StateScheduled: made at ingest but first due later (deliver_at or
	// delay); not claimed nor woken until it comes due or an operator
	// delivers its message now (delivery.due).
	StateScheduled DeliveryState = "scheduled"
	// StateQueued: waiting to be claimed for its first attempt, or again
	// after a redelivery or a release before any I/O.
	StateQueued DeliveryState = "queued"
	// StateDelivering: claimed by a worker, whose lease bounds the attempt.
	StateDelivering DeliveryState = "delivering"
	// StateRetrying: an attempt failed for now; due again at its next time.
	StateRetrying DeliveryState = "retrying"
	// StateAwaitingAck: handed over; the target's receipt is still owed.
	StateAwaitingAck DeliveryState = "awaiting_ack"
	// StateDelivered: done.
	StateDelivered DeliveryState = "delivered"
	// StateFailed: failed for good.
	StateFailed DeliveryState = "failed"
	// StateStalled: woken the maximum number of times and never claimed;
	// nothing was tried. The target's next start claims it again.
	StateStalled DeliveryState = "stalled"
	// StateBlocked: waiting behind an unsettled earlier delivery of its
	// lane (a fifo target's deliveries of one ordering key).
	StateBlocked DeliveryState = "blocked"
	// StateSkipped: settled without being sent, by an operator or, as it
	// was made, by its target's transform (a cancel).
	StateSkipped DeliveryState = "skipped"
	// StateSuperseded: a delivery of an earlier generation that had failed
	// or stalled when its message was sent again; final, and counted
	// nowhere, as only the current generation counts.
	StateSuperseded DeliveryState = "superseded"
)

// DeliveryStates is the canonical set, in lifecycle order.
var DeliveryStates = []DeliveryState{
	StateScheduled, StateQueued, StateBlocked, StateDelivering, StateRetrying, StateAwaitingAck,
	StateDelivered, StateFailed, StateStalled, StateSkipped, StateSuperseded,
}

// CountedStates are the states a delivery of its message's current
// generation can be in: every state but superseded. The counts of
// deliveries by state list these.
var CountedStates = slices.DeleteFunc(slices.Clone(DeliveryStates), func(s DeliveryState) bool { return s == StateSuperseded })

// ParseDeliveryState returns s as a state, or an error listing the states.
func ParseDeliveryState(s string) (DeliveryState, error) {
	return parse("delivery state", s, DeliveryStates)
}

// UnmarshalText accepts only a canonical state.
func (s *DeliveryState) UnmarshalText(text []byte) error {
	return unmarshalText("delivery state", text, DeliveryStates, s)
}

// Final reports whether nothing more happens to the delivery unless an
// operator redelivers it.
func (s DeliveryState) Final() bool {
	return s == StateDelivered || s == StateFailed || s == StateSkipped || s == StateSuperseded
}

// InFlight reports whether Waybill is still at work on the delivery: it is
// neither final nor stalled, as a message in flight is not settled.
func (s DeliveryState) InFlight() bool { return !s.Final() && s != StateStalled }

// Faulted reports whether the delivery settled short of delivery: failed,
// or stalled, as a faulted message is in error or stalled.
func (s DeliveryState) Faulted() bool { return s == StateFailed || s == StateStalled }

// StatesWhere lists the delivery states for which keep reports true, in
// canonical order.
func StatesWhere(keep func(DeliveryState) bool) []DeliveryState {
	return slices.DeleteFunc(slices.Clone(DeliveryStates), func(s DeliveryState) bool { return !keep(s) })
}

// Label is the state as a person reads it.
func (s DeliveryState) Label() string {
	switch s {
	case StateScheduled:
		return "Scheduled"
	case StateQueued:
		return "Queued"
	case StateDelivering:
		return "Delivering"
	case StateRetrying:
		return "Retrying"
	case StateAwaitingAck:
		return "Awaiting receipt"
	case StateDelivered:
		return "Delivered"
	case StateFailed:
		return "Failed"
	case StateStalled:
		return "Stalled"
	case StateBlocked:
		return "Blocked"
	case StateSkipped:
		return "Skipped"
	case StateSuperseded:
		return "Superseded"
	}
	return string(s)
}
