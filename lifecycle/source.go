package lifecycle

import (
	"encoding/json"
	"errors"
)

// Source is a place messages come in from on their own, without a client
// posting them through the API: a directory files are dropped in, a table
// an upstream system writes rows to, a sender's signed webhooks. Its name is the source of the messages it takes,
// which routes match.
type Source struct {
	// Name identifies the source; a name as CheckName allows.
	Name string `json:"name"`
	// Kind is one of the kinds of the sources package, which checks Config.
	Kind string `json:"kind"`
	// Enabled false makes the source take nothing and touch nothing.
	Enabled bool `json:"enabled"`
	// Config is the kind's own configuration, a JSON object.
	Config json.RawMessage `json:"config"`
}

// Validate checks the fields every source has and returns all problems
// joined. The kind's own configuration is the kind's to check.
func (s Source) Validate() error {
	errs := []error{CheckName("name", s.Name), CheckName("kind", s.Kind)}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(s.Config, &obj); err != nil || obj == nil {
		errs = append(errs, &FieldError{Field: "config", Problem: "must be a JSON object"})
	}
	return errors.Join(errs...)
}
