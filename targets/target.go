package targets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// Attempt is one attempt at one delivery, as a Deliverer sees it.
type Attempt struct {
	MessageID  uuid.UUID
	DeliveryID uuid.UUID
	// Seq numbers the delivery within its message, from 1.
	Seq    int
	Target string
	// Number is the attempt's number, from 1.
	Number int
	// Redelivered is true once an operator has queued the delivery again:
	// the target may hold the payload from an earlier attempt.
	Redelivered bool
	// Created is when the delivery was made; the retry policy's max_age
	// counts from it.
	Created     time.Time
	Source      string
	From        string
	To          string
	ContentType string
	Payload     []byte
}

// Deliverer makes one attempt. ctx ends at the attempt timeout or when the
// worker stops. A failure for now is an outcome of kind retry whose RetryAt
// is zero, or the time the target asked for; the worker's retry policy
// sets the time.
type Deliverer interface {
	Deliver(ctx context.Context, a Attempt) lifecycle.Outcome
}

// Kind is one kind of target.
type Kind struct {
	Name string
	// Concurrency is the default of a target's max_concurrent.
	Concurrency int
	// New checks the target's configuration and makes its Deliverer. Its
	// field errors name config.<field>.
	New func(t lifecycle.Target) (Deliverer, error)
}

// kinds is the registry, by name.
var kinds = map[string]Kind{
	"http": {Name: "http", Concurrency: 5, New: newHTTP},
	"file": {Name: "file", Concurrency: 1, New: newFile},
}

// Names returns the kinds, in name order.
func Names() []string {
	names := make([]string, 0, len(kinds))
	for name := range kinds {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the kind of that name.
func Lookup(name string) (Kind, error) {
	k, ok := kinds[name]
	if !ok {
		return Kind{}, &lifecycle.FieldError{Field: "kind",
			Problem: fmt.Sprintf("%q is not a target kind: allowed are %s", name, strings.Join(Names(), ", "))}
	}
	return k, nil
}

// Prepare fills the target's defaults and checks all of it, its kind's
// configuration included; every problem is a *lifecycle.FieldError, joined.
func Prepare(t lifecycle.Target) (lifecycle.Target, error) {
	k, err := Lookup(t.Kind)
	if err != nil {
		return t, errors.Join(lifecycle.CheckName("name", t.Name), err)
	}
	t = t.WithDefaults(k.Concurrency)
	if err := t.Validate(); err != nil {
		return t, err
	}
	if _, err := k.New(t); err != nil {
		return t, err
	}
	return t, nil
}

// New makes the Deliverer of a prepared target.
func New(t lifecycle.Target) (Deliverer, error) {
	k, err := Lookup(t.Kind)
	if err != nil {
		return nil, err
	}
	return k.New(t)
}

// decodeConfig reads a kind's configuration into v, refusing unknown fields.
func decodeConfig(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &lifecycle.FieldError{Field: "config", Problem: err.Error()}
	}
	return nil
}
