package journal

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// Line is an event as one JSON object: the form GET /journal gives and the
// retention archive keeps, one per line. The delivery fields are null for
// an event that is not a delivery's.
type Line struct {
	Position   int64                    `json:"position"`
	At         time.Time                `json:"at"`
	Stream     string                   `json:"stream"`
	Version    int                      `json:"version"`
	Kind       Kind                     `json:"kind"`
	Actor      string                   `json:"actor"`
	DeliveryID *uuid.UUID               `json:"delivery_id"`
	Target     *string                  `json:"target"`
	OldState   *lifecycle.DeliveryState `json:"old_state"`
	NewState   *lifecycle.DeliveryState `json:"new_state"`
	// Text is the event in words.
	Text string `json:"text"`
	// Payload is the event's payload as stored (see docs/events.md).
	Payload json.RawMessage `json:"payload"`
}

// LineOf is the line of an event with its payload as encoded (json.Marshal
// of e.Payload); payload may be nil where it is not wanted.
func LineOf(e Event, payload json.RawMessage) Line {
	l := Line{Position: e.Position, At: e.RecordedAt, Stream: e.Stream, Version: e.Version,
		Kind: e.Kind(), Actor: e.Actor, Text: e.Text(), Payload: payload}
	if e.DeliveryID != uuid.Nil {
		l.DeliveryID = &e.DeliveryID
	}
	if e.Target != "" {
		l.Target = &e.Target
	}
	if e.OldState != "" {
		l.OldState, l.NewState = &e.OldState, &e.NewState
	}
	return l
}

// Event reads the line back: its payload decoded as Decode does, and the
// envelope checked, as every read of the journal does.
func (l Line) Event() (Event, error) {
	p, err := Decode(l.Kind, l.Payload)
	if err != nil {
		return Event{}, fmt.Errorf("position %d: %w", l.Position, err)
	}
	e := Event{Position: l.Position, RecordedAt: l.At.UTC(), Stream: l.Stream, Version: l.Version, Actor: l.Actor, Payload: p}
	if l.DeliveryID != nil {
		e.DeliveryID = *l.DeliveryID
	}
	if l.Target != nil {
		e.Target = *l.Target
	}
	if l.OldState != nil {
		e.OldState = *l.OldState
	}
	if l.NewState != nil {
		e.NewState = *l.NewState
	}
	if err := e.CheckEnvelope(); err != nil {
		return Event{}, fmt.Errorf("position %d: %w", l.Position, err)
	}
	return e, nil
}
