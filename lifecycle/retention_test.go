package lifecycle

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

func period(d time.Duration) *Duration { return new(Duration(d)) }

func TestRetentionValidate(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name string
		r    Retention
		want []string
	}{
		{"keeps everything", Retention{}, nil},
		{"payload only", Retention{PayloadAfter: period(time.Second)}, nil},
		{"all set", Retention{PayloadAfter: period(day), SettledAfter: period(7 * day), FailedAfter: period(7 * day), ArchiveDir: "/var/archive"}, nil},
		{"archive dir alone", Retention{ArchiveDir: "/var/archive"}, nil},
		{"below a second", Retention{PayloadAfter: period(999 * time.Millisecond)}, []string{"retention.payload_after"}},
		{"zero", Retention{SettledAfter: period(0), ArchiveDir: "/a"}, []string{"retention.settled_after"}},
		{"negative", Retention{SettledAfter: period(time.Hour), FailedAfter: period(-time.Hour), ArchiveDir: "/a"},
			[]string{"retention.failed_after", "retention.failed_after"}},
		{"failed shorter", Retention{SettledAfter: period(2 * day), FailedAfter: period(day), ArchiveDir: "/a"}, []string{"retention.failed_after"}},
		{"failed without settled", Retention{FailedAfter: period(day)}, []string{"retention.failed_after"}},
		{"no archive", Retention{SettledAfter: period(day)}, []string{"retention.archive_dir"}},
		{"relative archive", Retention{SettledAfter: period(day), ArchiveDir: "archive"}, []string{"retention.archive_dir"}},
		{"control character", Retention{ArchiveDir: "/a\nb"}, []string{"retention.archive_dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fields(tt.r.Validate()); !slices.Equal(got, tt.want) {
				t.Errorf("fields %v, want %v (%v)", got, tt.want, tt.r.Validate())
			}
			s := DefaultSettings()
			s.Retention = tt.r
			if got := fields(s.Validate()); !slices.Equal(got, tt.want) {
				t.Errorf("settings: fields %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRetentionJSON(t *testing.T) {
	var s Settings
	if err := json.Unmarshal([]byte(`{"delivery":{"max_dispatches":5}}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Retention.Enabled() || s.Validate() != nil {
		t.Errorf("settings without retention: %+v, %v", s.Retention, s.Validate())
	}
	in := `{"payload_after":"1h0m0s","settled_after":"72h0m0s","failed_after":null,"archive_dir":"/a"}`
	var r Retention
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if r.PayloadAfter.D() != time.Hour || r.SettledAfter.D() != 72*time.Hour || r.FailedAfter != nil {
		t.Errorf("read %+v", r)
	}
	out, err := json.Marshal(r)
	if err != nil || string(out) != in {
		t.Errorf("written %s, %v; want %s", out, err, in)
	}
	if r.Shortest() != time.Hour || (Retention{}).Shortest() != 0 {
		t.Errorf("shortest %v", r.Shortest())
	}
}

// TestRetentionEqual: settings are equal when every period is set alike,
// to the same length, and the archive_dir is the same.
func TestRetentionEqual(t *testing.T) {
	hour, day := Duration(time.Hour), Duration(24*time.Hour)
	r := Retention{PayloadAfter: &hour, SettledAfter: &day, ArchiveDir: "/a"}
	same := r
	same.PayloadAfter = new(Duration(time.Hour))
	if !r.Equal(same) || !(Retention{}).Equal(Retention{}) {
		t.Error("equal settings differ")
	}
	for name, o := range map[string]Retention{
		"a period longer":      {PayloadAfter: &day, SettledAfter: &day, ArchiveDir: "/a"},
		"a period unset":       {SettledAfter: &day, ArchiveDir: "/a"},
		"a period set":         {PayloadAfter: &hour, SettledAfter: &day, FailedAfter: &day, ArchiveDir: "/a"},
		"another archive_dir":  {PayloadAfter: &hour, SettledAfter: &day, ArchiveDir: "/b"},
		"retention turned off": {},
	} {
		if r.Equal(o) || o.Equal(r) {
			t.Errorf("%s: equal", name)
		}
	}
}

// TestRetentionRule runs the rule over every status: a payload goes only
// from a settled message that is not faulted, a message leaves only once
// settled, a faulted one only by failed_after, and each at its period from
// the last transition, not before.
func TestRetentionRule(t *testing.T) {
	settled := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	r := Retention{PayloadAfter: period(time.Hour), SettledAfter: period(3 * time.Hour), FailedAfter: period(5 * time.Hour), ArchiveDir: "/a"}
	for _, s := range MessageStatuses {
		for _, age := range []time.Duration{0, time.Hour - 1, time.Hour, 3*time.Hour - 1, 3 * time.Hour, 5*time.Hour - 1, 5 * time.Hour, 1000 * time.Hour} {
			now := settled.Add(age)
			wantPayload := s.Settled() && !s.Faulted() && age >= time.Hour
			wantRemoval := s.Settled() && (!s.Faulted() && age >= 3*time.Hour || s.Faulted() && age >= 5*time.Hour)
			if got := r.PayloadDue(s, settled, now); got != wantPayload {
				t.Errorf("%s at %v: PayloadDue %v", s, age, got)
			}
			if got := r.RemovalDue(s, settled, now); got != wantRemoval {
				t.Errorf("%s at %v: RemovalDue %v", s, age, got)
			}
			if (Retention{}).PayloadDue(s, settled, now) || (Retention{}).RemovalDue(s, settled, now) {
				t.Errorf("%s at %v: due with nothing set", s, age)
			}
		}
		if slices.Contains(ExpungeStatuses(), s) != (s.Settled() && !s.Faulted()) {
			t.Errorf("%s: ExpungeStatuses", s)
		}
		if slices.Contains(SettledStatuses(), s) != s.Settled() {
			t.Errorf("%s: SettledStatuses", s)
		}
	}
	failedForever := Retention{SettledAfter: period(time.Hour), ArchiveDir: "/a"}
	if failedForever.RemovalDue(StatusError, settled, settled.Add(100000*time.Hour)) {
		t.Error("a faulted message is removed with failed_after null")
	}
}
