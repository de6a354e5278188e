package lifecycle

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Duration is a time.Duration that reads and writes as a Go duration string
// such as "200ms" or "1m30s", the form a person writes in configuration.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is the Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return durationError(fmt.Sprintf("%q", text))
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a JSON string holding a Go duration; null leaves d
// as it is. Without it a bare number such as 30, the likeliest mistake,
// would get the decoder's error about Go types instead of the format.
func (d *Duration) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	// A string without escapes, as the journal holds it, is its own text:
	// decoding it with encoding/json would be most of the work.
	if text, ok := plainString(data); ok {
		return d.UnmarshalText(text)
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return durationError(string(data))
	}
	return d.UnmarshalText([]byte(s))
}

// plainString returns what is between the quotes of a JSON string that
// has no escapes and no control characters and is valid UTF-8: the string
// itself, as encoding/json would read it.
func plainString(data []byte) ([]byte, bool) {
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return nil, false
	}
	text := data[1 : len(data)-1]
	for _, c := range text {
		if c == '"' || c == '\\' || c < 0x20 {
			return nil, false
		}
	}
	return text, utf8.Valid(text)
}

func durationError(input string) error {
	return fmt.Errorf("%s is not a duration: write it as a string such as \"200ms\", \"30s\" or \"1h30m\"", input)
}
