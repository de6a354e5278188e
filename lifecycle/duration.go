package lifecycle

import (
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
		return fmt.Errorf("%q is not a duration: write it as in \"200ms\", \"30s\" or \"1h30m\"", text)
	}
	*d = Duration(v)
	return nil
}
