package journal

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// ConfigStream is the stream of route, target and settings changes.
const ConfigStream = "config"

// MessageStream is the stream of one message's events.
func MessageStream(id uuid.UUID) string { return id.String() }

// operationPrefix starts the name of an operation's stream, which a
// message id never does.
const operationPrefix = "operation:"

// OperationStream is the stream of one bulk operation's events.
func OperationStream(id uuid.UUID) string { return operationPrefix + id.String() }

// OperationOf returns the operation whose stream is stream; false for any
// other stream.
func OperationOf(stream string) (uuid.UUID, bool) {
	rest, ok := strings.CutPrefix(stream, operationPrefix)
	if !ok || len(rest) != 36 {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(rest)
	return id, err == nil
}

// Event is one journal row.
type Event struct {
	// Position is the event's place in the whole journal, from 1; set on read.
	Position int64
	// RecordedAt is the command's clock when it decided the event.
	RecordedAt time.Time
	Stream     string
	// Version is the event's place in its stream, from 1.
	Version int
	// DeliveryID and Target name the delivery of a delivery event.
	DeliveryID uuid.UUID
	Target     string
	// Actor is who caused the event; see the Actor constructors.
	Actor string
	// OldState and NewState are the delivery's state before and after a
	// delivery event, so history reads without folding.
	OldState lifecycle.DeliveryState
	NewState lifecycle.DeliveryState
	Payload  Payload
}

// Kind is the kind of the event's payload.
func (e Event) Kind() Kind { return e.Payload.Kind() }

// Text is the event in words, for history pages.
func (e Event) Text() string { return e.Payload.Text() }

// CheckEnvelope checks the columns around a payload against its kind. The
// journal runs it on every append and read; readers of raw rows, such as the
// feed, run it too, so no event reaches a consumer unchecked.
func (e Event) CheckEnvelope() error {
	k := e.Kind()
	var errs []error
	if e.Stream == "" {
		errs = append(errs, errors.New("stream is empty"))
	}
	if e.Version < 1 {
		errs = append(errs, fmt.Errorf("version %d: must be 1 or more", e.Version))
	}
	if e.RecordedAt.IsZero() {
		errs = append(errs, errors.New("recorded_at is unset"))
	}
	if err := CheckActor(e.Actor); err != nil {
		errs = append(errs, err)
	}
	_, opStream := OperationOf(e.Stream)
	_, healthStream := TargetOf(e.Stream)
	if s := k.Stream(); s != "" && e.Stream != s || s == "" && namedStream(e.Stream) || k.Operation() != opStream ||
		k.Health() != healthStream {
		errs = append(errs, fmt.Errorf("kind %s does not belong to stream %q", k, e.Stream))
	}
	if k.Delivery() {
		if e.DeliveryID == uuid.Nil || e.Target == "" {
			errs = append(errs, fmt.Errorf("%s needs a delivery id and a target", k))
		}
		for _, s := range []lifecycle.DeliveryState{e.OldState, e.NewState} {
			if _, err := lifecycle.ParseDeliveryState(string(s)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
			}
		}
	} else if e.DeliveryID != uuid.Nil || e.Target != "" || e.OldState != "" || e.NewState != "" {
		errs = append(errs, fmt.Errorf("%s is not a delivery event: it has no delivery id, target or states", k))
	}
	return errors.Join(errs...)
}

// The fixed actors.
const (
	ActorSystem    = "system"
	ActorSweep     = "sweep"
	ActorCallbacks = "callbacks"
	// ActorRetention expunges payloads and removes settled messages.
	ActorRetention = "retention"
)

// WorkerActor is the worker of a target.
func WorkerActor(target string) string { return "worker:" + target }

// OperatorActor is a person or API client acting by name.
func OperatorActor(subject string) string { return "operator:" + subject }

// OperatorName is the subject of an operator's actor, as OperatorActor
// took it; any other actor comes back as it is.
func OperatorName(actor string) string {
	name, _ := strings.CutPrefix(actor, "operator:")
	return name
}

// SourceActor is a source that brings messages in.
func SourceActor(name string) string { return "source:" + name }

// CheckActor accepts system, sweep, callbacks, retention, and worker:,
// operator: or source: with a name after the colon.
func CheckActor(actor string) error {
	if actor == ActorSystem || actor == ActorSweep || actor == ActorCallbacks || actor == ActorRetention {
		return nil
	}
	for _, prefix := range []string{"worker:", "operator:", "source:"} {
		if name, ok := strings.CutPrefix(actor, prefix); ok && name != "" {
			return nil
		}
	}
	return fmt.Errorf("actor %q: must be system, sweep, callbacks, retention, worker:<target>, operator:<subject> or source:<name>", actor)
}
