package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	return errors.Join(CheckName("name", s.Name), CheckName("kind", s.Kind), checkConfig(s.Config))
}

// checkConfig checks a target's or a source's configuration as every kind
// needs it: a JSON object, with no NUL (\u0000) in a name or a string,
// which the database's jsonb, where it is kept, cannot hold.
func checkConfig(config json.RawMessage) error {
	var obj map[string]any
	if err := json.Unmarshal(config, &obj); err != nil || obj == nil {
		return &FieldError{Field: "config", Problem: "must be a JSON object"}
	}
	if at := nulAt(obj, "config"); at != "" {
		return &FieldError{Field: at, Problem: `must not hold a NUL (\u0000)`}
	}
	return nil
}

// nulAt is the path below at of the first name or string of v that holds a
// NUL, "" when none does.
func nulAt(v any, at string) string {
	switch v := v.(type) {
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return at
		}
	case []any:
		for i, item := range v {
			if p := nulAt(item, fmt.Sprintf("%s[%d]", at, i)); p != "" {
				return p
			}
		}
	case map[string]any:
		for _, name := range slices.Sorted(maps.Keys(v)) {
			if strings.IndexByte(name, 0) >= 0 {
				return at + "." + name
			}
			if p := nulAt(v[name], at+"."+name); p != "" {
				return p
			}
		}
	}
	return ""
}
