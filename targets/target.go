package targets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// Attempt is one attempt at one delivery, as a Deliverer sees it.
type Attempt struct {
	// MessageID is the message's id; with Seq it names the delivery in
	// what a target writes.
	MessageID uuid.UUID
	// DeliveryID is the delivery's id, the same for all its attempts: the
	// idempotency key a receiver can drop repeats by.
	DeliveryID uuid.UUID
	// Seq numbers the delivery within its message, from 1.
	Seq int
	// Target is the target's name.
	Target string
	// Number is the attempt's number over the delivery's whole life, from 1.
	Number int
	// Round is the attempt's number since the delivery was made or an
	// operator last redelivered it, from 1: the retry policy's max_attempts
	// counts it.
	Round int
	// Redelivered is true once an operator has queued the delivery again:
	// the target may hold the payload from an earlier attempt.
	Redelivered bool
	// Since is when the delivery was made or an operator last redelivered
	// it: the retry policy's max_age counts from it.
	Since time.Time
	// Source, From and To are the message's source and parties.
	Source string
	From   string
	To     string
	// ContentType is the payload's media type; empty when the source gave
	// none.
	ContentType string
	// Payload is the message body, sent as it is.
	Payload []byte
	// Headers are the message's headers, names lower case: an http target
	// sends those its forward_headers name.
	Headers map[string]string
	// Trace is the message's trace context: the attempt's span continues
	// it, and a target that opts in passes its baggage on.
	Trace lifecycle.Trace
	// Method, Path and SetHeaders are what the target's transform made of
	// the delivery (Payload and ContentType are then its too): an http
	// target sends with Method instead of its own, to Path appended to
	// its URL's path, with SetHeaders over its own.
	Method     string
	Path       string
	SetHeaders map[string]string
	// NotSent is why nothing is sent: the target's transform settled the
	// delivery when it was made and an operator redelivered it since, so
	// the attempt fails for good with it.
	NotSent string
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
	// Name is what a target's kind field says.
	Name string
	// Concurrency is how many attempts each process runs at once to a
	// target that leaves slots and max_concurrent out (Slots).
	Concurrency int
	// Check reads a target's configuration, fills its defaults and checks
	// it; it returns the configuration with the defaults written in. Its
	// field errors name config.<field>.
	Check func(config json.RawMessage) (json.RawMessage, error)
	// New makes the Deliverer of a target whose configuration Check
	// accepts, signing with keys (LoadKeys); now is the process's clock,
	// which a Retry-After in seconds and a signature's timestamp count
	// from.
	New func(t lifecycle.Target, keys []Key, now func() time.Time) (Deliverer, error)
}

// httpSlots is an http target's default slots in each process.
const httpSlots = 5

// kinds is the registry, by name.
var kinds = map[string]Kind{
	"http": {Name: "http", Concurrency: httpSlots, Check: checkHTTP, New: newHTTP},
	"file": {Name: "file", Concurrency: 1, Check: checkFile, New: newFile},
}

// Names returns the kinds, in name order.
func Names() []string {
	return slices.Sorted(maps.Keys(kinds))
}

// Slots is how many attempts to t each process runs at once
// (lifecycle.Target.ProcessSlots), its kind's default Concurrency, 1 for
// a kind unknown.
func Slots(t lifecycle.Target) int {
	def := 1
	if k, ok := kinds[t.Kind]; ok {
		def = k.Concurrency
	}
	return t.ProcessSlots(def)
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

// Prepare fills the target's defaults, those of its kind's configuration
// included, and checks all of it; every problem is a *lifecycle.FieldError,
// joined.
func Prepare(t lifecycle.Target) (lifecycle.Target, error) {
	k, err := Lookup(t.Kind)
	if err != nil {
		// An unknown kind has no configuration to check, but the fields
		// every target has are still reported.
		return t, errors.Join(err, without(t.WithDefaults().Validate(), "kind"))
	}
	t = t.WithDefaults()
	config, err := k.Check(t.Config)
	if err != nil {
		// The kind names the configuration's fields; Validate could only
		// repeat that it is not an object.
		return t, errors.Join(without(t.Validate(), "config"), err)
	}
	t.Config = config
	err = errors.Join(t.Validate(), prepareSigning(&t))
	if t.Receipt != nil && t.Receipt.Correlate != nil && t.Kind != "http" {
		err = errors.Join(err, &lifecycle.FieldError{Field: "receipt.correlate",
			Problem: "only an http target takes the receiver's id for the message from its answer"})
	}
	return t, err
}

// prepareSigning fills an http target's signing with its default and
// checks it; a target of another kind signs nothing and takes none.
func prepareSigning(t *lifecycle.Target) error {
	if t.Kind != "http" {
		if t.Signing != nil {
			return &lifecycle.FieldError{Field: "signing", Problem: "only an http target signs what it sends"}
		}
		return nil
	}
	var s lifecycle.Signing
	if t.Signing != nil {
		s = *t.Signing
	}
	t.Signing = &s
	return checkSigning(&s)
}

// Signs reports whether a prepared target has signing keys: an http
// target whose scheme is not none.
func Signs(t lifecycle.Target) bool { return t.Signing != nil && t.Signing.Scheme != SchemeNone }

// New makes the Deliverer of a prepared target, signing with keys (the
// target's keys, LoadKeys; none for a target that does not sign) and
// reading time from now: the process's clock (service.Base's), so that a
// time the target asks for is read against the clock that decides when
// it is due.
func New(t lifecycle.Target, keys []Key, now func() time.Time) (Deliverer, error) {
	k, err := Lookup(t.Kind)
	if err != nil {
		return nil, err
	}
	return k.New(t, keys, now)
}

// without drops the field errors on any of fields from a joined error.
func without(err error, fields ...string) error {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var kept []error
	for _, e := range errs {
		if fe, ok := e.(*lifecycle.FieldError); !ok || !slices.Contains(fields, fe.Field) {
			kept = append(kept, e)
		}
	}
	return errors.Join(kept...)
}

// config is a kind's configuration.
type config interface {
	// check fills the defaults and returns every problem joined.
	check() error
}

// readConfig reads a kind's configuration, a JSON object, into c, fills its
// defaults and checks it. It reads one field at a time, so that every error
// names its field as config.<name>, and a field whose value cannot be read
// is reported as such and not again by the check. A name c has no field
// for is refused; names match exactly, where encoding/json would quietly
// take "URL" for "url".
func readConfig(raw json.RawMessage, c config) error { return ReadConfig(raw, c, c.check) }

// ReadConfig is how a kind's configuration is read, for the kinds of
// other things (sources) too: the JSON object raw is read one field at a
// time into the struct v points to, every error naming its field as
// config.<name>, then check fills the defaults and checks the whole.
func ReadConfig(raw json.RawMessage, v any, check func() error) error {
	var object map[string]json.RawMessage
	if err := json.Unmarshal(raw, &object); err != nil || object == nil {
		return &lifecycle.FieldError{Field: "config", Problem: "must be a JSON object"}
	}
	fields := structFields(v)
	var errs []error
	var unread []string
	for _, name := range slices.Sorted(maps.Keys(object)) {
		field, ok := fields[name]
		if !ok {
			errs = append(errs, &lifecycle.FieldError{Field: "config." + name,
				Problem: "is not a field of this kind: allowed are " + strings.Join(slices.Sorted(maps.Keys(fields)), ", ")})
			continue
		}
		if err := json.Unmarshal(object[name], field.Addr().Interface()); err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: "config." + name, Problem: valueProblem(err, field.Type())})
			unread = append(unread, "config."+name)
		}
	}
	return errors.Join(append(errs, without(check(), unread...))...)
}

// structFields maps the JSON names of the fields of the struct v points to
// onto the fields.
func structFields(v any) map[string]reflect.Value {
	s := reflect.ValueOf(v).Elem()
	fields := make(map[string]reflect.Value, s.NumField())
	for i := range s.NumField() {
		name, _, _ := strings.Cut(s.Type().Field(i).Tag.Get("json"), ",")
		fields[name] = s.Field(i)
	}
	return fields
}

// valueProblem says what a field's value should have been, in the words of
// the configuration rather than of Go types.
func valueProblem(err error, t reflect.Type) string {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) {
		return err.Error() // a type's own message, such as lifecycle.Duration's
	}
	switch t.Kind() {
	case reflect.String:
		return "must be a string"
	case reflect.Bool:
		return "must be true or false"
	case reflect.Map:
		return "must be an object of strings"
	}
	return "must be a " + t.String()
}
