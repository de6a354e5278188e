package projection

import (
	"cmp"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// Message is the folded state of one message stream: the row of the messages
// table together with its deliveries.
type Message struct {
	ID uuid.UUID
	// Version is the version of the last event folded in: the greatest of
	// RowVersion and the deliveries' Version (derive).
	Version int
	// RowVersion is the version of the last event that changed what the
	// messages row shows (the columns but version and updated_at), or
	// that changed no delivery either: an event that only moves a delivery
	// writes the delivery's row and leaves the message's. RowUpdatedAt is
	// UpdatedAt as of that event. The row holds these two as its version
	// and updated_at.
	RowVersion     int
	RowUpdatedAt   time.Time
	Source         string
	From           string
	To             string
	ContentType    string
	IdempotencyKey string
	// OrderingKey puts the message's deliveries to fifo targets in lanes.
	OrderingKey string
	// DuplicateKey is the sender's identity of the message; a message of
	// the same source and key before it makes it a PossibleDuplicateOf the
	// latest such.
	DuplicateKey        string
	PossibleDuplicateOf uuid.UUID
	// Type is what the message is in its sender's words; empty for none.
	Type string
	// Headers are the message's headers, names lower case; nil for none.
	Headers map[string]string
	// Generation counts the message's sends, from 1: a resend or a replay
	// starts the next. Its status and counts read its current
	// generation's deliveries only.
	Generation    int
	PayloadSize   int64
	PayloadSHA256 string
	Stage         lifecycle.MessageStage
	Refusal       lifecycle.Refusal
	Status        lifecycle.MessageStatus
	// Error is the refusal's reason, or the last error of the first failed
	// delivery, else of the first stalled one.
	Error string
	// AttemptCount is the attempts of the current generation's
	// deliveries together (derive).
	AttemptCount int
	CreatedAt    time.Time
	// UpdatedAt is the time of the last event that moved the message (all
	// but message.payload_expunged): retention's clock counts from it.
	UpdatedAt time.Time
	// PayloadExpunged says retention dropped the payload bytes; the size
	// and SHA-256 stay.
	PayloadExpunged bool
	// Deliveries are in Seq order.
	Deliveries []Delivery
	// Callback is the message's outcome callback, nil when it has no
	// callback URL.
	Callback *Callback
	// Trace is the trace context the message belongs to, which its
	// attempts, callbacks and the actions on it continue.
	Trace lifecycle.Trace
}

// Delivery is the folded state of one delivery: a row of the deliveries table.
type Delivery struct {
	ID        uuid.UUID
	MessageID uuid.UUID
	// MessageCreatedAt is the message's CreatedAt, kept on the row so that
	// a target's messages are listed newest first on an index.
	MessageCreatedAt time.Time
	Seq              int
	// Version is the version of the last event of the message's stream
	// that changed the delivery.
	Version int
	// Generation is the message's generation the delivery belongs to.
	Generation int
	Target     string
	// LaneKey and LaneSeq place the delivery in the lane of its target and
	// LaneKey, its message's ordering key, at LaneSeq; a delivery in no
	// lane has "" and 0. LaneContinue says its failure lets the next of
	// the lane go (on_failure continue when it was placed).
	LaneKey      string
	LaneSeq      int64
	LaneContinue bool
	// Shaped says its target's transform made a shape of it, kept in
	// delivery_shapes: what it sends, or why it sends nothing.
	Shaped bool
	State  lifecycle.DeliveryState
	// Attempts counts the claims whose attempt started.
	Attempts int
	// DispatchCount counts the wake-ups since the last claim.
	DispatchCount int
	Redeliveries  int
	// RedeliveredAt is when an operator last redelivered the delivery, or
	// when it came due after its schedule (delivery.due), zero if neither,
	// and RedeliveredAttempts is Attempts then: either starts the retry
	// policy's budget afresh, so max_attempts and max_age count from it.
	RedeliveredAt       time.Time
	RedeliveredAttempts int
	// NextDue is when the sweep next acts on the delivery: the next wake-up
	// while queued or retrying, the receipt deadline while awaiting_ack;
	// zero otherwise. A delivering delivery's time is LeaseEnd.
	NextDue    time.Time
	ClaimToken uuid.UUID
	LeaseEnd   time.Time
	LastError  string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time
}

// Delivery returns the delivery with the id, or nil.
func (m *Message) Delivery(id uuid.UUID) *Delivery {
	for i := range m.Deliveries {
		if m.Deliveries[i].ID == id {
			return &m.Deliveries[i]
		}
	}
	return nil
}

// Facts are the fields the lifecycle's rules read.
func (d *Delivery) Facts() lifecycle.Facts {
	return lifecycle.Facts{State: d.State, NextDue: d.NextDue, DispatchCount: d.DispatchCount, LeaseEnd: d.LeaseEnd}
}

// Clone returns a deep copy, so a command can fold ahead without touching
// the state it read.
func (m *Message) Clone() *Message {
	c := *m
	c.Deliveries = append([]Delivery(nil), m.Deliveries...)
	if m.Callback != nil {
		cb := *m.Callback
		c.Callback = &cb
	}
	return &c
}

// derive sets, on a message read from its rows with all its deliveries,
// the fields no row holds: the stream's version and last move are those
// of the row, the message's or a delivery's, that an event changed last;
// the attempts are the current deliveries'.
func (m *Message) derive() {
	m.Version, m.UpdatedAt, m.AttemptCount = m.RowVersion, m.RowUpdatedAt, 0
	for i := range m.Deliveries {
		d := &m.Deliveries[i]
		if d.Version > m.Version {
			m.Version, m.UpdatedAt = d.Version, d.UpdatedAt
		}
		if m.Current(d) {
			m.AttemptCount += d.Attempts
		}
	}
}

// row is what the messages row shows that an event may change, but its
// version and updated_at: an event that changes none of it and moves a
// delivery leaves the row as it is.
type row struct {
	stage           lifecycle.MessageStage
	refusal         lifecycle.Refusal
	status          lifecycle.MessageStatus
	errorText       string
	deliveries      int
	generation      int
	payloadExpunged bool
}

func (m *Message) row() row {
	return row{m.Stage, m.Refusal, m.Status, m.Error, m.currentDeliveries(), m.Generation, m.PayloadExpunged}
}

// settle derives the fields that follow from the others.
func (m *Message) settle() {
	// On the stack for the usual few deliveries: the fold settles after
	// every event.
	var few [8]lifecycle.DeliveryState
	states := few[:0]
	m.AttemptCount = 0
	for _, d := range m.Deliveries {
		if d.Generation == m.Generation {
			states = append(states, d.State)
			m.AttemptCount += d.Attempts
		}
	}
	m.Status = lifecycle.DeriveStatus(m.Stage, m.Refusal, states)
	if m.Stage == lifecycle.StageDispatched {
		m.Error = m.firstError()
	}
}

// Current reports whether the delivery is of the message's current
// generation, the one its status and every count read.
func (m *Message) Current(d *Delivery) bool { return d.Generation == m.Generation }

// ScheduledUntil is when the message's scheduled deliveries come due;
// zero when it has none.
func (m *Message) ScheduledUntil() time.Time {
	for i := range m.Deliveries {
		if d := &m.Deliveries[i]; m.Current(d) && d.State == lifecycle.StateScheduled {
			return d.NextDue
		}
	}
	return time.Time{}
}

// NewestFirst returns the message's deliveries newest generation first,
// each generation's in Seq order: how the API and the console list them,
// so the deliveries that count come first.
func (m *Message) NewestFirst() []Delivery {
	out := slices.Clone(m.Deliveries)
	slices.SortStableFunc(out, func(a, b Delivery) int { return cmp.Compare(b.Generation, a.Generation) })
	return out
}

// CurrentTargets lists the targets of the message's current generation,
// in name order: what a resend sends to, all of them or a subset.
func (m *Message) CurrentTargets() []string {
	var out []string
	for i := range m.Deliveries {
		if d := &m.Deliveries[i]; m.Current(d) {
			out = append(out, d.Target)
		}
	}
	slices.Sort(out)
	return out
}

func (m *Message) firstError() string {
	for _, want := range []lifecycle.DeliveryState{lifecycle.StateFailed, lifecycle.StateStalled} {
		for _, d := range m.Deliveries {
			if d.State == want && m.Current(&d) {
				return d.LastError
			}
		}
	}
	return ""
}
