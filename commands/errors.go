package commands

import (
	"errors"
	"fmt"
	"strings"

	"github.com/waybill/waybill/projection"
)

// The outcomes callers branch on. Errors about a state wrap them in a
// *StateError that tells the state found and the ones allowed.
var (
	// ErrNotFound: no such message, delivery, route or target.
	ErrNotFound = projection.ErrNotFound
	// ErrNoSecrets: the Writer was made without a secrets key, which
	// sealing and opening a target's signing keys need.
	ErrNoSecrets = errors.New("no secrets key: signing keys can be neither sealed nor opened")
	// ErrTooManyKeys: a rotation would have more than targets.MaxLiveKeys
	// keys of one owner sign at once.
	ErrTooManyKeys = errors.New("too many signing keys")
	// ErrInvalid: the input failed validation; the error joins a
	// *lifecycle.FieldError per problem.
	ErrInvalid = errors.New("invalid input")
	// ErrInvalidTarget: a route names a target that does not exist.
	ErrInvalidTarget = errors.New("invalid target")
	// ErrExists: a route, target or source with that id or name exists
	// already; an *ExistsError says which field.
	ErrExists = errors.New("already exists")
	// ErrTargetInUse: a target that routes still name cannot be deleted.
	ErrTargetInUse = errors.New("target in use")
	// ErrMaybeStored: the transaction that stored a message lost its
	// connection, and whether it committed could not be learned: the
	// message may be stored.
	ErrMaybeStored = errors.New("the message may have been stored")
	// ErrNotAccepted: the message is past its intake and cannot be refused.
	ErrNotAccepted = errors.New("message not accepted")
	// ErrNotClaimable: the delivery is not in a state a worker may take.
	ErrNotClaimable = errors.New("delivery not claimable")
	// ErrClaimLost: the claim token is not the delivery's current claim;
	// another worker or the sweep has taken the delivery since.
	ErrClaimLost = errors.New("claim lost")
	// ErrReceiptRefused: the delivery awaits no receipt; the refusal was
	// journaled.
	ErrReceiptRefused = errors.New("receipt refused")
	// ErrNotRedispatchable: only a dispatched message can be redispatched.
	ErrNotRedispatchable = errors.New("message not redispatchable")
	// ErrNotScheduled: only a scheduled message is delivered now.
	ErrNotScheduled = errors.New("message not scheduled")
	// ErrNotRedeliverable: the delivery is not in a redeliverable state.
	ErrNotRedeliverable = errors.New("delivery not redeliverable")
	// ErrPayloadExpunged: retention dropped the message's payload, so it
	// cannot be sent again (redeliver, redispatch).
	ErrPayloadExpunged = projection.ErrPayloadExpunged
	// ErrNotSkippable: the delivery is being attempted, or is delivered or
	// skipped already.
	ErrNotSkippable = errors.New("delivery not skippable")
	// ErrNotResendable: the message cannot be sent again now; the
	// *StateError says why.
	ErrNotResendable = errors.New("message not resendable")
	// ErrStale: the message moved since the version an action named; the
	// *StaleError gives the current one.
	ErrStale = errors.New("message changed")
	// ErrNotCancellable: the bulk operation has ended already.
	ErrNotCancellable = errors.New("operation not cancellable")
	// ErrIdempotencyConflict: a message of the source holds the
	// idempotency key with other content; an *IdempotencyConflictError
	// names the fields that differ.
	ErrIdempotencyConflict = errors.New("idempotency key held by another message")
	// ErrOperationMoved: the bulk operation moved since it was read (it
	// was cancelled, or another process took a batch); read it again.
	ErrOperationMoved = errors.New("operation moved")
)

// StateError is a command refused for the state of its message or delivery.
type StateError struct {
	// Err is the sentinel: ErrNotRedeliverable, ErrClaimLost, …
	Err error
	// State is the message stage or delivery state found.
	State string
	// Allowed lists the stages or states the command accepts, when the
	// state was what refused it.
	Allowed []string
	// Reason is the fold's explanation.
	Reason string
}

func (e *StateError) Error() string {
	s := fmt.Sprintf("%v: %s", e.Err, e.Reason)
	if len(e.Allowed) > 0 {
		s += fmt.Sprintf(" (it is %s; allowed: %s)", e.State, strings.Join(e.Allowed, ", "))
	}
	return s
}

func (e *StateError) Unwrap() error { return e.Err }

// ExistsError is ErrExists for the field whose value is taken.
type ExistsError struct {
	// Kind is what was to be created: target, source or route.
	Kind string
	// Field and Value are the field and its value that another has.
	Field, Value string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("a %s with %s %q exists already", e.Kind, e.Field, e.Value)
}

func (e *ExistsError) Unwrap() error { return ErrExists }

// IdempotencyConflictError is ErrIdempotencyConflict for a repeat of a
// source's idempotency key whose message differs from the one held.
type IdempotencyConflictError struct {
	Source, Key string
	// Fields are those that differ, among payload, from, to,
	// ordering_key and callback_url.
	Fields []string
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("source %s holds idempotency key %q for a message with another %s", e.Source, e.Key,
		strings.Join(e.Fields, ", "))
}

func (e *IdempotencyConflictError) Unwrap() error { return ErrIdempotencyConflict }

// refused turns a fold's refusal into sentinel's StateError; other errors
// pass through.
func refused(sentinel, err error) error {
	var ill *projection.IllegalError
	if !errors.As(err, &ill) {
		return err
	}
	return &StateError{Err: sentinel, State: ill.State, Allowed: ill.Allowed, Reason: ill.Reason}
}

// refusedToSend is refused for the operator's actions that send the
// payload again: a refusal for its expunge is ErrPayloadExpunged's.
func refusedToSend(sentinel, err error) error {
	if errors.Is(err, ErrPayloadExpunged) {
		sentinel = ErrPayloadExpunged
	}
	return refused(sentinel, err)
}

// invalid wraps validation problems in ErrInvalid; nil when there are none.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}
