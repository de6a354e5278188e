package lifecycle

// MessageStatus is the one status a user sees for a message: in lists,
// filters and the API. It is derived by DeriveStatus and stored.
type MessageStatus string

// The message statuses.
const (
	StatusReceived        MessageStatus = "received"
	StatusScheduled       MessageStatus = "scheduled"
	StatusInProgress      MessageStatus = "in_progress"
	StatusRetrying        MessageStatus = "retrying"
	StatusBlocked         MessageStatus = "blocked"
	StatusAwaitingReceipt MessageStatus = "awaiting_receipt"
	StatusStalled         MessageStatus = "stalled"
	StatusSkipped         MessageStatus = "skipped"
	StatusDelivered       MessageStatus = "delivered"
	StatusNotRouted       MessageStatus = "not_routed"
	StatusRefused         MessageStatus = "refused"
	StatusError           MessageStatus = "error"
)

// MessageStatuses is the canonical set.
var MessageStatuses = []MessageStatus{
	StatusReceived, StatusScheduled, StatusInProgress, StatusRetrying, StatusBlocked, StatusAwaitingReceipt,
	StatusStalled, StatusSkipped, StatusDelivered, StatusNotRouted, StatusRefused, StatusError,
}

// ParseMessageStatus returns s as a status, or an error listing the statuses.
func ParseMessageStatus(s string) (MessageStatus, error) {
	return parse("message status", s, MessageStatuses)
}

// UnmarshalText accepts only a canonical status.
func (s *MessageStatus) UnmarshalText(text []byte) error {
	return unmarshalText("message status", text, MessageStatuses, s)
}

// Settled reports whether the message needs nothing more from Waybill on its
// own: every delivery ended, or none is left that would move without an
// operator or a target coming back.
func (s MessageStatus) Settled() bool {
	switch s {
	case StatusDelivered, StatusNotRouted, StatusRefused, StatusError, StatusStalled, StatusSkipped:
		return true
	}
	return false
}

// Faulted reports whether the message settled short of delivery for a
// fault an operator has to look at: a failure, or a stall.
func (s MessageStatus) Faulted() bool {
	return s == StatusError || s == StatusStalled
}

// StatusesWhere lists the statuses for which keep reports true, in
// canonical order: the unsettled ones are StatusesWhere(not(Settled)).
func StatusesWhere(keep func(MessageStatus) bool) []MessageStatus {
	var out []MessageStatus
	for _, s := range MessageStatuses {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// Label is the status as a person reads it.
func (s MessageStatus) Label() string {
	switch s {
	case StatusReceived:
		return "Received"
	case StatusScheduled:
		return "Scheduled"
	case StatusInProgress:
		return "In progress"
	case StatusRetrying:
		return "Retrying"
	case StatusAwaitingReceipt:
		return "Awaiting receipt"
	case StatusStalled:
		return "Stalled"
	case StatusBlocked:
		return "Blocked"
	case StatusSkipped:
		return "Skipped"
	case StatusDelivered:
		return "Delivered"
	case StatusNotRouted:
		return "Not routed"
	case StatusRefused:
		return "Refused"
	case StatusError:
		return "Error"
	}
	return string(s)
}

// statusRanks is the heart of DeriveStatus: for a dispatched message with
// deliveries, the first row whose states any delivery is in gives the
// status. Work still to do on our side (retrying, queued, delivering)
// ranks above work we will do at its time (scheduled), then above waiting
// for a receipt, and a failure above a stall; every
// delivery state is in exactly one row.
var statusRanks = []struct {
	states []DeliveryState
	status MessageStatus
}{
	{[]DeliveryState{StateRetrying}, StatusRetrying},
	{[]DeliveryState{StateQueued, StateDelivering}, StatusInProgress},
	{[]DeliveryState{StateScheduled}, StatusScheduled},
	{[]DeliveryState{StateBlocked}, StatusBlocked},
	{[]DeliveryState{StateAwaitingAck}, StatusAwaitingReceipt},
	{[]DeliveryState{StateFailed}, StatusError},
	{[]DeliveryState{StateStalled}, StatusStalled},
	{[]DeliveryState{StateSkipped}, StatusSkipped},
	{[]DeliveryState{StateDelivered}, StatusDelivered},
}

// rank is the row of statusRanks that holds s; a state in no row ranks
// last.
func rank(s DeliveryState) int {
	for i, r := range statusRanks {
		for _, rs := range r.states {
			if rs == s {
				return i
			}
		}
	}
	return len(statusRanks)
}

// statusRank is the row of statusRanks that gives the status, or -1.
func statusRank(status MessageStatus) int {
	for i, r := range statusRanks {
		if r.status == status {
			return i
		}
	}
	return -1
}

// StatesGiving lists the delivery states that give a dispatched message
// status when they rank highest among its deliveries; none for a status
// no delivery state gives. A delivery event that moves to none of them
// turns the message into status only if another of its deliveries is in
// one already: the alerter asks the journal that (schema.FailuresSQL)
// rather than folding the stream.
func StatesGiving(status MessageStatus) []DeliveryState {
	return StatesWhere(func(s DeliveryState) bool {
		return DeriveStatus(StageDispatched, "", []DeliveryState{s}) == status
	})
}

// DeriveStatus is the one rule for the status of a message: received while
// accepted; refused or error (by the refusal's class) when refused; not
// routed when dispatched to nothing; otherwise the status of the highest
// ranked state among its deliveries (statusRanks). deliveries are those of
// the message's current generation.
func DeriveStatus(stage MessageStage, refusal Refusal, deliveries []DeliveryState) MessageStatus {
	switch stage {
	case StageAccepted:
		return StatusReceived
	case StageRefused:
		if refusal == RefusalRejected {
			return StatusRefused
		}
		return StatusError
	}
	if len(deliveries) == 0 {
		return StatusNotRouted
	}
	best := len(statusRanks)
	for _, s := range deliveries {
		best = min(best, rank(s))
	}
	if best == len(statusRanks) {
		return StatusDelivered
	}
	return statusRanks[best].status
}

// MayBecome reports whether one delivery of a dispatched message moving
// from old to new can turn the message's status into status when it was
// not: new gives that status, or old outranked it and new does not. The
// alerter folds a stream only for the events that can raise an alert.
func MayBecome(old, new DeliveryState, status MessageStatus) bool {
	target := statusRank(status)
	if target < 0 || old == new {
		return false
	}
	return rank(new) == target || rank(old) < target && rank(new) > target
}
