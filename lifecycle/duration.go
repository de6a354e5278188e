package lifecycle

import (
	"encoding/json"
	"fmt"
	"time"
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
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return durationError(string(data))
	}
	return d.UnmarshalText([]byte(s))
}

func durationError(input string) error {
	return fmt.Errorf("%s is not a duration: write it as a string such as \"200ms\", \"30s\" or \"1h30m\"", input)
}
