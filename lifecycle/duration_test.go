package lifecycle

import (
	"encoding/json"
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
