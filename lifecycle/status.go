package lifecycle

// MessageStatus is the one status a user sees for a message: in lists,
// filters and the API. It is derived by DeriveStatus and stored.
type MessageStatus string

// The message statuses.
const (
	StatusReceived        MessageStatus = "received"
	StatusInProgress      MessageStatus = "in_progress"
	StatusRetrying        MessageStatus = "retrying"
	StatusAwaitingReceipt MessageStatus = "awaiting_receipt"
	StatusStalled         MessageStatus = "stalled"
	StatusDelivered       MessageStatus = "delivered"
	StatusNotRouted       MessageStatus = "not_routed"
	StatusRefused         MessageStatus = "refused"
	StatusError           MessageStatus = "error"
)

// MessageStatuses is the canonical set.
var MessageStatuses = []MessageStatus{
	StatusReceived, StatusInProgress, StatusRetrying, StatusAwaitingReceipt,
	StatusStalled, StatusDelivered, StatusNotRouted, StatusRefused, StatusError,
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
	case StatusDelivered, StatusNotRouted, StatusRefused, StatusError, StatusStalled:
		return true
	}
	return false
}

// Label is the status as a person reads it.
func (s MessageStatus) Label() string {
	switch s {
	case StatusReceived:
		return "Received"
	case StatusInProgress:
		return "In progress"
	case StatusRetrying:
		return "Retrying"
	case StatusAwaitingReceipt:
		return "Awaiting receipt"
	case StatusStalled:
		return "Stalled"
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

// DeriveStatus is the one rule for the status of a message; the first rule
// that holds wins. Work still to do on our side (retrying, queued,
// delivering) ranks above waiting for a receipt, and a failure above a stall.
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
	var queued, retrying, awaiting, failed, stalled bool
	for _, s := range deliveries {
		switch s {
		case StateRetrying:
			retrying = true
		case StateQueued, StateDelivering:
			queued = true
		case StateAwaitingAck:
			awaiting = true
		case StateFailed:
			failed = true
		case StateStalled:
			stalled = true
		}
	}
	switch {
	case retrying:
		return StatusRetrying
	case queued:
		return StatusInProgress
	case awaiting:
		return StatusAwaitingReceipt
	case failed:
		return StatusError
	case stalled:
		return StatusStalled
	}
	return StatusDelivered
}
