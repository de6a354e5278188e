package lifecycle

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDurationJSONRoundTrip(t *testing.T) {
	type holder struct {
		D Duration `json:"d"`
	}
	for _, d := range []time.Duration{0, 200 * time.Millisecond, 90 * time.Second, 72 * time.Hour, -5 * time.Second} {
		b, err := json.Marshal(holder{Duration(d)})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"d":"` + d.String() + `"}`; string(b) != want {
			t.Errorf("marshal %v = %s, want %s", d, b, want)
		}
		var back holder
		if err := json.Unmarshal(b, &back); err != nil || back.D.D() != d {
			t.Errorf("round trip of %v = %v, %v", d, back.D, err)
		}
	}
	var h holder
	if err := json.Unmarshal([]byte(`{"d":"1m30s"}`), &h); err != nil || h.D.D() != 90*time.Second {
		t.Errorf(`"1m30s" = %v, %v`, h.D, err)
	}
	h = holder{Duration(time.Second)}
	if err := json.Unmarshal([]byte(`{"d":null}`), &h); err != nil || h.D.D() != time.Second {
		t.Errorf("null changed %v, %v", h.D, err)
	}
}

func TestDurationRefusesBadInput(t *testing.T) {
	for _, in := range []string{`"abc"`, `"10"`, `""`, `"5 sec"`, `30`, `true`, `{}`} {
		var d Duration
		err := json.Unmarshal([]byte(in), &d)
		if err == nil {
			t.Errorf("%s: accepted as %v", in, d)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "is not a duration") || !strings.Contains(msg, `"200ms"`) {
			t.Errorf("%s: unclear error %q", in, msg)
		}
	}
	var d Duration
	if err := d.UnmarshalText([]byte("1h")); err != nil || d.D() != time.Hour {
		t.Errorf("UnmarshalText 1h = %v, %v", d, err)
	}
}

// TestDurationInDays: a whole number of days is taken, as periods are
// thought in, and written back in Go's notation; anything else ending in
// d is refused.
func TestDurationInDays(t *testing.T) {
	for in, want := range map[string]time.Duration{`"30d"`: 30 * 24 * time.Hour, `"0d"`: 0, `"36500d"`: 36500 * 24 * time.Hour} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D() != want {
			t.Errorf("%s = %v, %v", in, d, err)
		}
	}
	for _, in := range []string{`"1.5d"`, `"-1d"`, `"-0d"`, `"+1d"`, `"d"`, `"1dd"`, `"36501d"`, `"1h1d"`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil || !strings.Contains(err.Error(), `"30d"`) {
			t.Errorf("%s: %v, %v", in, d, err)
		}
	}
	if b, _ := json.Marshal(Duration(30 * 24 * time.Hour)); string(b) != `"720h0m0s"` {
		t.Errorf("written as %s", b)
	}
}

// TestDurationPlainStringAgrees checks that the short way UnmarshalJSON
// takes with a string without escapes reads what encoding/json reads.
func TestDurationPlainStringAgrees(t *testing.T) {
	for _, in := range []string{`"1h30m"`, `"1\u0068"`, `"5µs"`, `"5\u00b5s"`, `""`, `"1h` + "\xff" + `"`, `"1` + "\t" + `h"`,
		`"1\"h"`, `"1\\h"`, `"`, `"1h`, `1h"`} {
		var got Duration
		gotErr := got.UnmarshalJSON([]byte(in))
		var s string
		want, wantErr := Duration(0), json.Unmarshal([]byte(in), &s)
		if wantErr == nil {
			wantErr = want.UnmarshalText([]byte(s))
		} else {
			wantErr = durationError(in)
		}
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s: read as %v, %v; encoding/json reads %v, %v", in, got, gotErr, want, wantErr)
		}
	}
	// As few as UnmarshalText: the journal's fast decoder reads every
	// expunged payload's duration through it.
	var d Duration
	data := []byte(`"36h0m0s"`)
	text := data[1 : len(data)-1]
	if json, plain := testing.AllocsPerRun(100, func() { _ = d.UnmarshalJSON(data) }),
		testing.AllocsPerRun(100, func() { _ = d.UnmarshalText(text) }); json != plain {
		t.Errorf("a plain string costs %v allocations, its text %v", json, plain)
	}
}
