package lifecycle

// MessageStage is where a message is in its intake: accepted (stored, not yet
// routed), dispatched (routed, with its deliveries) or refused (settled
// without deliveries).
type MessageStage string

// The message stages.
const (
	StageAccepted   MessageStage = "accepted"
	StageDispatched MessageStage = "dispatched"
	StageRefused    MessageStage = "refused"
)

// MessageStages is the canonical set, in lifecycle order.
var MessageStages = []MessageStage{StageAccepted, StageDispatched, StageRefused}

// ParseMessageStage returns s as a stage, or an error listing the stages.
func ParseMessageStage(s string) (MessageStage, error) {
	return parse("message stage", s, MessageStages)
}

// UnmarshalText accepts only a canonical stage.
func (s *MessageStage) UnmarshalText(text []byte) error {
	return unmarshalText("message stage", text, MessageStages, s)
}

// Label is the stage as a person reads it.
func (s MessageStage) Label() string {
	switch s {
	case StageAccepted:
		return "Accepted"
	case StageDispatched:
		return "Dispatched"
	case StageRefused:
		return "Refused"
	}
	return string(s)
}

// Refusal is the class of a message's refusal. It decides the status:
// a message turned down on its merits is Refused, one we failed to take in
// is Error.
type Refusal string

// The refusal classes.
const (
	// RefusalRejected: the source turned the message down on its merits
	// (a repeat, a failed verification, an unknown party, too large).
	RefusalRejected Refusal = "rejected"
	// RefusalInternal: the failure was ours (storage, database, a bug).
	RefusalInternal Refusal = "internal"
)

// Refusals is the canonical set.
var Refusals = []Refusal{RefusalRejected, RefusalInternal}

// ParseRefusal returns s as a refusal class, or an error listing the classes.
func ParseRefusal(s string) (Refusal, error) {
	return parse("refusal", s, Refusals)
}

// UnmarshalText accepts only a canonical refusal class.
func (r *Refusal) UnmarshalText(text []byte) error {
	return unmarshalText("refusal", text, Refusals, r)
}

// Label is the refusal class as a person reads it.
func (r Refusal) Label() string {
	switch r {
	case RefusalRejected:
		return "Rejected"
	case RefusalInternal:
		return "Internal error"
	}
	return string(r)
}
