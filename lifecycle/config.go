package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// AnyParty is the route pattern that covers every party name.
const AnyParty = "*"

// Route sends the messages of one source whose parties its patterns cover to
// one target. Routes are matched once, when a message is dispatched.
type Route struct {
	ID     uuid.UUID `json:"id"`
	Source string    `json:"source"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Target string    `json:"target"`
}

// Covers reports whether the route applies to a message of source from one
// party to another: the source is the route's, and each pattern is AnyParty
// or exactly the party's name.
func (r Route) Covers(source, from, to string) bool {
	return r.Source == source && patternCovers(r.From, from) && patternCovers(r.To, to)
}

func patternCovers(pattern, name string) bool {
	return pattern == AnyParty || pattern == name
}

// Validate checks every field and returns all problems joined.
func (r Route) Validate() error {
	return errors.Join(
		CheckName("source", r.Source),
		CheckParty("from", r.From),
		CheckParty("to", r.To),
		CheckName("target", r.Target),
	)
}

// Target is a destination deliveries are made to. Its name identifies it
// everywhere (routes, deliveries, the wake-up subject), whatever its kind.
type Target struct {
	// Name identifies the target; a name as CheckName allows.
	Name string `json:"name"`
	// Kind is one of the kinds of the targets package, which checks Config.
	Kind string `json:"kind"`
	// Enabled false makes the target claim nothing: its deliveries are
	// woken until max_dispatches runs out and then stall.
	Enabled bool `json:"enabled"`
	// Config is the kind's own configuration, a JSON object.
	Config json.RawMessage `json:"config"`
	// MaxConcurrent bounds the attempts in flight per process. Default the
	// kind's (5 for http, 1 for file); from 1 to 100.
	MaxConcurrent int `json:"max_concurrent"`
	// AttemptTimeout bounds one attempt. Default 30 s; from 1 ms to 1 h.
	AttemptTimeout Duration `json:"attempt_timeout"`
	// Retry decides what follows an attempt that failed for now.
	Retry RetryPolicy `json:"retry"`
	// Receipt, when set, makes a handed-over delivery await its receipt
	// instead of counting as delivered.
	Receipt *ReceiptPolicy `json:"receipt,omitempty"`
}

// ReceiptPolicy is how long a target's receipt may take.
type ReceiptPolicy struct {
	// Timeout is the time from the hand-over to the receipt deadline, after
	// which the delivery fails. Required; from 1 s to 720 h.
	Timeout Duration `json:"timeout"`
}

// The defaults and bounds of a Target.
const (
	DefaultAttemptTimeout = 30 * time.Second
	MaxAttemptTimeout     = time.Hour
	MaxMaxConcurrent      = 100
	MaxReceiptTimeout     = 720 * time.Hour
)

// WithDefaults fills the fields left at zero; kindConcurrency is the
// default of MaxConcurrent for the target's kind.
func (t Target) WithDefaults(kindConcurrency int) Target {
	if len(t.Config) == 0 {
		t.Config = json.RawMessage(`{}`)
	}
	if t.MaxConcurrent == 0 {
		t.MaxConcurrent = kindConcurrency
	}
	if t.AttemptTimeout == 0 {
		t.AttemptTimeout = Duration(DefaultAttemptTimeout)
	}
	t.Retry = t.Retry.WithDefaults()
	return t
}

// Lease is how long a claim holds a delivery: twice the attempt timeout and
// a minute, so a slow attempt and its recording finish inside it.
func (t Target) Lease() time.Duration { return 2*t.AttemptTimeout.D() + time.Minute }

// Validate checks every field and returns all problems joined. The kind's
// own configuration is the kind's to check.
func (t Target) Validate() error {
	var errs []error
	errs = append(errs, CheckName("name", t.Name), CheckName("kind", t.Kind))
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(t.Config, &obj); err != nil || obj == nil {
		errs = append(errs, &FieldError{Field: "config", Problem: "must be a JSON object"})
	}
	if t.MaxConcurrent < 1 || t.MaxConcurrent > MaxMaxConcurrent {
		errs = append(errs, &FieldError{Field: "max_concurrent",
			Problem: fmt.Sprintf("must be from 1 to %d, got %d", MaxMaxConcurrent, t.MaxConcurrent)})
	}
	if t.AttemptTimeout < Duration(time.Millisecond) || t.AttemptTimeout.D() > MaxAttemptTimeout {
		errs = append(errs, &FieldError{Field: "attempt_timeout", Problem: "must be from 1ms to 1h"})
	}
	errs = append(errs, t.Retry.Validate())
	if t.Receipt != nil && (t.Receipt.Timeout < Duration(time.Second) || t.Receipt.Timeout.D() > MaxReceiptTimeout) {
		errs = append(errs, &FieldError{Field: "receipt.timeout", Problem: "must be from 1s to 720h"})
	}
	return errors.Join(errs...)
}

// Settings are the system-wide knobs, changed through commands and journaled.
type Settings struct {
	Delivery DeliverySettings `json:"delivery"`
	// Retention is how long settled messages are kept; the zero value,
	// also what a missing "retention" gives, keeps everything.
	Retention Retention `json:"retention"`
}

// DeliverySettings bound the dispatch of deliveries.
type DeliverySettings struct {
	// MaxDispatches is how many unclaimed wake-ups a delivery gets before it
	// stalls. Default 5, from 1 to 20.
	MaxDispatches int `json:"max_dispatches"`
}

// The bounds of DeliverySettings.MaxDispatches.
const (
	DefaultMaxDispatches = 5
	MinMaxDispatches     = 1
	MaxMaxDispatches     = 20
)

// DefaultSettings are the settings of a database nobody configured.
func DefaultSettings() Settings {
	return Settings{Delivery: DeliverySettings{MaxDispatches: DefaultMaxDispatches}}
}

// Validate checks every field and returns all problems joined.
func (s Settings) Validate() error {
	var errs []error
	if n := s.Delivery.MaxDispatches; n < MinMaxDispatches || n > MaxMaxDispatches {
		errs = append(errs, &FieldError{Field: "delivery.max_dispatches",
			Problem: fmt.Sprintf("must be from %d to %d, got %d", MinMaxDispatches, MaxMaxDispatches, n)})
	}
	return errors.Join(append(errs, s.Retention.Validate())...)
}

// FieldError says which input field is wrong and what is allowed.
type FieldError struct {
	// Field is the field's path in the input's JSON form, such as
	// "retry.max_attempts" or "config.url".
	Field string
	// Problem says what is wrong and what is allowed.
	Problem string
}

// Error is "<field>: <problem>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// CheckName validates a source, target or kind name: 1 to 63 characters of
// lower-case letters, digits, '_' and '-', starting with a letter or digit,
// which keeps it safe as one token of a NATS subject and a file name.
func CheckName(field, name string) error {
	if !isName(name) {
		return &FieldError{Field: field,
			Problem: fmt.Sprintf("%q is not a name: use 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit", name)}
	}
	return nil
}

// isName is ^[a-z0-9][a-z0-9_-]{0,62}$ without a regexp: the journal's
// decoding checks a name in most events it reads.
func isName(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// MaxPartyLength bounds party names and route patterns.
const MaxPartyLength = 255

// CheckParty validates a party name or pattern: 1 to 255 bytes of printable
// text with no control characters.
func CheckParty(field, party string) error {
	if party == "" || len(party) > MaxPartyLength {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be 1 to %d bytes", MaxPartyLength)}
	}
	for _, r := range party {
		if r < 0x20 || r == 0x7f {
			return &FieldError{Field: field, Problem: "must not contain control characters"}
		}
	}
	return nil
}
