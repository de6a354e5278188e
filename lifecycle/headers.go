package lifecycle

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Message header limits: entries, and bytes of names and values in all.
const (
	MaxHeaders     = 64
	MaxHeaderBytes = 8 << 10
)

// LowerHeaders returns h with its names lower case, as a message keeps
// them, and checks it as CheckHeaders does. Two names that differ only in
// case are refused rather than one dropped.
func LowerHeaders(field string, h map[string]string) (map[string]string, error) {
	if len(h) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(h))
	for _, name := range slices.Sorted(maps.Keys(h)) {
		lower := strings.ToLower(name)
		if _, ok := out[lower]; ok {
			return nil, &FieldError{Field: field + "." + lower, Problem: "is given twice, in different cases: header names are case-insensitive"}
		}
		out[lower] = h[name]
	}
	return out, CheckHeaders(field, out)
}

// CheckHeaders checks a message's headers: at most MaxHeaders, of at most
// MaxHeaderBytes in all, each name a lower-case HTTP token and each value
// UTF-8 text without control characters but tab.
func CheckHeaders(field string, h map[string]string) error {
	if len(h) > MaxHeaders {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must have at most %d entries, got %d", MaxHeaders, len(h))}
	}
	size := 0
	for _, name := range slices.Sorted(maps.Keys(h)) {
		value := h[name]
		size += len(name) + len(value)
		switch {
		case !isToken(name):
			return &FieldError{Field: field, Problem: fmt.Sprintf("%q is not a header name (an HTTP token)", name)}
		case name != strings.ToLower(name):
			return &FieldError{Field: field + "." + name, Problem: "must be lower case"}
		case !utf8.ValidString(value) || strings.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			return &FieldError{Field: field + "." + name, Problem: "must be UTF-8 text without control characters (a tab is allowed)"}
		}
	}
	if size > MaxHeaderBytes {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be at most %d bytes of names and values in all, got %d", MaxHeaderBytes, size)}
	}
	return nil
}
