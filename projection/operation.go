package projection

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// Operation is the folded state of one bulk operation's stream: a row of
// the operations table. The messages it matched are in its stream's
// operation.matched events, not here.
type Operation struct {
	ID uuid.UUID
	// Version is the version of the last event folded in.
	Version int
	Action  lifecycle.OperationAction
	Filter  lifecycle.OperationFilter
	Reason  string
	// CreatedBy is the actor who started it.
	CreatedBy string
	State     lifecycle.OperationState
	// Matched is how many messages the filter matched; Listed how many of
	// them the operation.matched events have listed so far (all of them
	// once its creation has committed).
	Matched int
	Listed  int
	// Done counts the messages acted on, Refused those that could not take
	// the action; together they are the next message's index in the list.
	Done    int
	Refused int
	// Error says why a failed operation failed.
	Error      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time
}

// Next is the index, in the list of messages matched, of the next message
// the operation takes.
func (o *Operation) Next() int { return o.Done + o.Refused }

// OperationChunk is how many message ids one operation.matched event lists:
// every one but the last lists exactly this many, so the event that holds
// the message at index i is the stream's version 2 + i/OperationChunk.
const OperationChunk = 1000

// MatchedVersion is the version of the operation.matched event that lists
// the message at index i of an operation's list.
func MatchedVersion(i int) int { return 2 + i/OperationChunk }

// ApplyOperation folds e into o, the state of e's operation stream before
// it (the zero Operation for a new stream). It checks that the event is
// legal there; on an error o is unchanged.
func ApplyOperation(o *Operation, e journal.Event) error {
	k := e.Kind()
	illegal := func(reason string, allowed ...lifecycle.OperationState) error {
		state := string(o.State)
		if o.Version == 0 {
			state = "a new stream"
		}
		return &IllegalError{Kind: k, State: state, Allowed: lifecycle.Strings(allowed), Reason: reason}
	}
	if !k.Operation() {
		return illegal("not an operation event")
	}
	if e.Version != o.Version+1 {
		return illegal(fmt.Sprintf("version %d does not follow %d", e.Version, o.Version))
	}
	next := *o
	at := e.RecordedAt
	if _, ok := e.Payload.(*journal.OperationCreated); !ok && o.State != lifecycle.OperationRunning {
		return illegal("the operation has ended", lifecycle.OperationRunning)
	}
	switch p := e.Payload.(type) {
	case *journal.OperationCreated:
		if o.Version != 0 {
			return illegal("the operation was created already")
		}
		id, ok := journal.OperationOf(e.Stream)
		if !ok {
			return illegal(fmt.Sprintf("stream %q is not an operation's", e.Stream))
		}
		next = Operation{ID: id, Action: p.Action, Filter: p.Filter, Reason: p.Reason, CreatedBy: e.Actor,
			State: lifecycle.OperationRunning, Matched: p.Matched, CreatedAt: at}
	case *journal.OperationMatched:
		switch {
		case o.Listed%OperationChunk != 0:
			return illegal(fmt.Sprintf("the list's last event holds %d messages, not %d: it was the last", o.Listed%OperationChunk, OperationChunk))
		case len(p.Messages) > OperationChunk:
			return illegal(fmt.Sprintf("it lists %d messages; an event lists at most %d", len(p.Messages), OperationChunk))
		case o.Listed+len(p.Messages) > o.Matched:
			return illegal(fmt.Sprintf("it lists messages %d to %d of the %d matched", o.Listed+1, o.Listed+len(p.Messages), o.Matched))
		}
		next.Listed += len(p.Messages)
	case *journal.OperationProgressed:
		switch {
		case o.Listed != o.Matched:
			return illegal(fmt.Sprintf("only %d of the %d messages matched are listed", o.Listed, o.Matched))
		case p.From != o.Next():
			return illegal(fmt.Sprintf("the batch starts at message %d, the next is %d", p.From, o.Next()))
		case o.Next()+p.Taken() > o.Matched:
			return illegal(fmt.Sprintf("the batch takes %d messages, %d are left", p.Taken(), o.Matched-o.Next()))
		}
		next.Done += len(p.Done)
		next.Refused += len(p.Refused)
	case *journal.OperationCancelled:
		next.State, next.FinishedAt = lifecycle.OperationCancelled, at
	case *journal.OperationFinished:
		if p.State == lifecycle.OperationDone && (o.Listed != o.Matched || o.Next() != o.Matched) {
			return illegal(fmt.Sprintf("it has taken %d of the %d messages matched", o.Next(), o.Matched))
		}
		next.State, next.Error, next.FinishedAt = p.State, p.Error, at
	default:
		return illegal("not an operation event")
	}
	next.Version, next.UpdatedAt = e.Version, at
	*o = next
	return nil
}

// RecordOperation makes e the next event of o's stream, as Record does for
// a message: its times and strings put in the form the database stores,
// the stream o's (or e's own for the first event) and the version the
// next, then folds it into o.
func RecordOperation(o *Operation, e journal.Event) (journal.Event, error) {
	journal.Normalize(&e)
	if o.Version > 0 {
		e.Stream = journal.OperationStream(o.ID)
	}
	e.Version = o.Version + 1
	if err := ApplyOperation(o, e); err != nil {
		return journal.Event{}, err
	}
	return e, nil
}
