package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

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
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Enabled bool   `json:"enabled"`
	// Config is the kind's own configuration, a JSON object.
	Config json.RawMessage `json:"config"`
}

// Validate checks every field and returns all problems joined.
func (t Target) Validate() error {
	var errs []error
	errs = append(errs, CheckName("name", t.Name), CheckName("kind", t.Kind))
	if len(t.Config) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(t.Config, &obj); err != nil || obj == nil {
			errs = append(errs, &FieldError{Field: "config", Problem: "must be a JSON object"})
		}
	}
	return errors.Join(errs...)
}

// Settings are the system-wide knobs, changed through commands and journaled.
type Settings struct {
	Delivery DeliverySettings `json:"delivery"`
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
	if n := s.Delivery.MaxDispatches; n < MinMaxDispatches || n > MaxMaxDispatches {
		return &FieldError{Field: "delivery.max_dispatches",
			Problem: fmt.Sprintf("must be from %d to %d, got %d", MinMaxDispatches, MaxMaxDispatches, n)}
	}
	return nil
}

// FieldError says which input field is wrong and what is allowed.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// namePattern keeps names safe as one token of a NATS subject and a file name.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CheckName validates a source, target or kind name: 1 to 63 characters of
// lower-case letters, digits, '_' and '-', starting with a letter or digit.
func CheckName(field, name string) error {
	if !namePattern.MatchString(name) {
		return &FieldError{Field: field,
			Problem: fmt.Sprintf("%q is not a name: use 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit", name)}
	}
	return nil
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
