package lifecycle

import (
	"fmt"
	"slices"
	"strings"
)

// parse returns s as a T when it is one of the canonical values, or an error
// that names the field and lists what is allowed.
func parse[T ~string](field, s string, all []T) (T, error) {
	if slices.Contains(all, T(s)) {
		return T(s), nil
	}
	return "", fmt.Errorf("invalid %s %q: allowed are %s", field, s, joinValues(all))
}

func joinValues[T ~string](all []T) string {
	names := make([]string, len(all))
	for i, v := range all {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// unmarshalText decodes a JSON string into *v when it is one of all.
func unmarshalText[T ~string](field string, text []byte, all []T, v *T) error {
	parsed, err := parse(field, string(text), all)
	if err != nil {
		return err
	}
	*v = parsed
	return nil
}

// Strings returns the values as plain strings, in order.
func Strings[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
