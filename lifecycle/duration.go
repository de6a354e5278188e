package lifecycle

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
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

// UnmarshalText reads a Go duration string or a number of days
// (ParseDuration).
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := ParseDuration(string(text))
	if err != nil {
		return durationError(fmt.Sprintf("%q", text))
	}
	*d = Duration(v)
	return nil
}

// maxDays bounds a duration given in days: a century, well within what a
// time.Duration holds.
const maxDays = 100 * 365

// ParseDuration reads a Go duration string such as "1h30m", or a whole
// number of days such as "30d", the unit periods of weeks and months are
// thought in, which Go's notation lacks. A duration written back is in
// Go's notation ("720h0m0s").
func ParseDuration(s string) (time.Duration, error) {
	days, ok := strings.CutSuffix(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 || n > maxDays || days[0] == '+' || days[0] == '-' {
		return 0, fmt.Errorf("%q is not a number of days from 0 to %d", s, maxDays)
	}
	return time.Duration(n) * 24 * time.Hour, nil
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
	return fmt.Errorf("%s is not a duration: write it as a string such as \"200ms\", \"30s\", \"1h30m\" or \"30d\"", input)
}
