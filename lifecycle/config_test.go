package lifecycle

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTargetWithDefaults(t *testing.T) {
	got := Target{Name: "alpha", Kind: "http"}.WithDefaults()
	if string(got.Config) != `{}` || got.MaxConcurrent != 0 || got.AttemptTimeout.D() != DefaultAttemptTimeout || got.Receipt != nil {
		t.Errorf("defaults %+v", got)
	}
	if !samePolicy(got.Retry, RetryPolicy{}.WithDefaults()) {
		t.Errorf("retry defaults %+v", got.Retry)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	set := Target{Name: "alpha", Kind: "file", Config: json.RawMessage(`{"dir":"/x"}`), MaxConcurrent: 3,
		AttemptTimeout: Duration(time.Second)}.WithDefaults()
	if string(set.Config) != `{"dir":"/x"}` || set.MaxConcurrent != 3 || set.AttemptTimeout.D() != time.Second {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
}

func TestTargetValidate(t *testing.T) {
	valid := Target{Name: "alpha", Kind: "http", Receipt: &ReceiptPolicy{Timeout: Duration(time.Hour)}}.WithDefaults()
	tests := []struct {
		name   string
		change func(t *Target)
		want   []string
	}{
		{"valid", func(*Target) {}, nil},
		{"name", func(t *Target) { t.Name = "Alpha" }, []string{"name"}},
		{"kind", func(t *Target) { t.Kind = "" }, []string{"kind"}},
		{"config not an object", func(t *Target) { t.Config = json.RawMessage(`[1]`) }, []string{"config"}},
		{"config null", func(t *Target) { t.Config = json.RawMessage(`null`) }, []string{"config"}},
		{"config trailing data", func(t *Target) { t.Config = json.RawMessage(`{} {}`) }, []string{"config"}},
		{"max_concurrent left out", func(t *Target) { t.MaxConcurrent = 0 }, nil},
		{"max_concurrent -1", func(t *Target) { t.MaxConcurrent = -1 }, []string{"max_concurrent"}},
		{"max_concurrent 101", func(t *Target) { t.MaxConcurrent = 101 }, []string{"max_concurrent"}},
		{"max_concurrent 100", func(t *Target) { t.MaxConcurrent = 100 }, nil},
		{"slots left out", func(t *Target) { t.Slots = 0 }, nil},
		{"slots -1", func(t *Target) { t.Slots = -1 }, []string{"slots"}},
		{"slots 101", func(t *Target) { t.Slots = 101 }, []string{"slots"}},
		{"slots 100 without max_concurrent", func(t *Target) { t.Slots = 100 }, nil},
		{"slots at max_concurrent", func(t *Target) { t.Slots, t.MaxConcurrent = 4, 4 }, nil},
		{"slots past max_concurrent", func(t *Target) { t.Slots, t.MaxConcurrent = 5, 4 }, []string{"slots"}},
		{"attempt_timeout below 1ms", func(t *Target) { t.AttemptTimeout = Duration(time.Microsecond) }, []string{"attempt_timeout"}},
		{"attempt_timeout above 1h", func(t *Target) { t.AttemptTimeout = Duration(time.Hour + 1) }, []string{"attempt_timeout"}},
		{"attempt_timeout 1h", func(t *Target) { t.AttemptTimeout = Duration(time.Hour) }, nil},
		{"retry", func(t *Target) { t.Retry.MaxAttempts = 0 }, []string{"retry.max_attempts"}},
		{"receipt.timeout missing", func(t *Target) { t.Receipt = &ReceiptPolicy{} }, []string{"receipt.timeout"}},
		{"receipt.timeout above 720h", func(t *Target) { t.Receipt.Timeout = Duration(721 * time.Hour) }, []string{"receipt.timeout"}},
		{"receipt.timeout 1s", func(t *Target) { t.Receipt.Timeout = Duration(time.Second) }, nil},
		{"no receipt", func(t *Target) { t.Receipt = nil }, nil},
		{"several", func(t *Target) { t.Name, t.MaxConcurrent, t.Retry.Jitter = "", -1, new(3.0) },
			[]string{"name", "max_concurrent", "retry.jitter"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := valid
			r := *valid.Receipt
			target.Receipt = &r
			tt.change(&target)
			if got := fields(target.Validate()); !slices.Equal(got, tt.want) {
				t.Errorf("fields %v, want %v (%v)", got, tt.want, target.Validate())
			}
		})
	}
}

func TestTargetLease(t *testing.T) {
	for _, tt := range []struct{ timeout, want time.Duration }{
		{30 * time.Second, 2 * time.Minute},
		{time.Millisecond, time.Minute + 2*time.Millisecond},
		{time.Hour, 2*time.Hour + time.Minute},
	} {
		if got := (Target{AttemptTimeout: Duration(tt.timeout)}).Lease(); got != tt.want {
			t.Errorf("Lease with attempt_timeout %v = %v, want %v", tt.timeout, got, tt.want)
		}
	}
}

func TestTargetJSON(t *testing.T) {
	in := `{"name":"alpha","kind":"http","enabled":true,"config":{"url":"http://127.0.0.1/"},"max_concurrent":2,` +
		`"attempt_timeout":"1.5s","retry":{"strategy":"linear","base_delay":"200ms","max_delay":"1m","jitter":0,` +
		`"max_attempts":4,"max_age":"2h0m0s"},"receipt":{"timeout":"30m0s"}}`
	var target Target
	if err := json.Unmarshal([]byte(in), &target); err != nil {
		t.Fatal(err)
	}
	if target.AttemptTimeout.D() != 1500*time.Millisecond || target.Retry.BaseDelay.D() != 200*time.Millisecond ||
		target.Retry.Jitter == nil || *target.Retry.Jitter != 0 || target.Receipt.Timeout.D() != 30*time.Minute {
		t.Fatalf("decoded %+v", target)
	}
	if d := target.WithDefaults(); *d.Retry.Jitter != 0 {
		t.Errorf("an explicit jitter 0 became %g", *d.Retry.Jitter)
	}
	out, err := json.Marshal(target)
	if err != nil {
		t.Fatal(err)
	}
	var back Target
	if err := json.Unmarshal(out, &back); err != nil || back.AttemptTimeout != target.AttemptTimeout ||
		!samePolicy(back.Retry, target.Retry) || *back.Receipt != *target.Receipt {
		t.Errorf("round trip %s: %+v %v", out, back, err)
	}
}

// TestIsNameIsThePattern holds isName to the pattern it replaces, over
// every string of up to three bytes from a set that covers each class, and
// over lengths around the bound.
func TestIsNameIsThePattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	alphabet := []string{"a", "z", "0", "9", "_", "-", "A", "Z", " ", ".", "/", "\x00", "\n", "é", "\xff", "`", "{", ":", "@", "["}
	var all []string
	var grow func(s string, n int)
	grow = func(s string, n int) {
		all = append(all, s)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(s+c, n-1)
		}
	}
	grow("", 3)
	for n := 60; n <= 66; n++ {
		all = append(all, strings.Repeat("a", n), "0"+strings.Repeat("-", n-1), "_"+strings.Repeat("a", n-1),
			strings.Repeat("a", n-1)+"\n")
	}
	for _, s := range all {
		if isName(s) != pattern.MatchString(s) {
			t.Errorf("%q: isName %v, the pattern %v", s, isName(s), pattern.MatchString(s))
		}
	}
}

// TestCallbackSettingsValidate names the list of each wrong entry.
func TestCallbackSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     CallbackSettings
		field string
	}{
		{"none", CallbackSettings{}, ""},
		{"good", CallbackSettings{AllowedNetworks: []string{"127.0.0.0/8", "::1/128", "10.1.0.0/16"},
			AllowedHosts: []string{"hooks.example.org", "*.example.com", "203.0.113.7", "::1", "Erp-1.Example"}}, ""},
		{"an address", CallbackSettings{AllowedNetworks: []string{"10.0.0.1"}}, "callbacks.allowed_networks"},
		{"host bits", CallbackSettings{AllowedNetworks: []string{"10.0.0.1/8"}}, "callbacks.allowed_networks"},
		{"not a network", CallbackSettings{AllowedNetworks: []string{"intranet"}}, "callbacks.allowed_networks"},
		{"too many", CallbackSettings{AllowedNetworks: make([]string, 101)}, "callbacks.allowed_networks"},
		{"a URL", CallbackSettings{AllowedHosts: []string{"https://hooks.example.org"}}, "callbacks.allowed_hosts"},
		{"a bare star", CallbackSettings{AllowedHosts: []string{"*"}}, "callbacks.allowed_hosts"},
		{"a star on a top-level domain", CallbackSettings{AllowedHosts: []string{"*.com"}}, "callbacks.allowed_hosts"},
		{"a star inside", CallbackSettings{AllowedHosts: []string{"hooks.*.com"}}, "callbacks.allowed_hosts"},
		{"an empty label", CallbackSettings{AllowedHosts: []string{"a..b"}}, "callbacks.allowed_hosts"},
		{"a port", CallbackSettings{AllowedHosts: []string{"a.example:8080"}}, "callbacks.allowed_hosts"},
		{"empty", CallbackSettings{AllowedHosts: []string{""}}, "callbacks.allowed_hosts"},
	} {
		err := tc.c.Validate()
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%s: %v, want a problem of %s", tc.name, err, tc.field)
		}
	}
	if got := DefaultSettings().Callbacks; got.AllowedNetworks == nil || got.AllowedHosts == nil {
		t.Errorf("defaults %+v: want empty lists", got)
	}
}

// TestProcessSlots: slots decide each process's attempts at once, else
// max_concurrent, else the kind's default.
func TestProcessSlots(t *testing.T) {
	for _, c := range []struct{ slots, maxConcurrent, want int }{
		{0, 0, 5}, {8, 0, 8}, {0, 3, 3}, {2, 3, 2},
	} {
		if got := (Target{Slots: c.slots, MaxConcurrent: c.maxConcurrent}).ProcessSlots(5); got != c.want {
			t.Errorf("slots %d, max_concurrent %d: %d, want %d", c.slots, c.maxConcurrent, got, c.want)
		}
	}
}

// TestCheckPartyAndKey: a party and a key are UTF-8 text without control
// characters, whose refusal names the field and the byte; a party is
// required and a key is not.
func TestCheckPartyAndKey(t *testing.T) {
	for _, tt := range []struct {
		s            string
		party, key   bool
		problemNames string
	}{
		{"", false, true, ""},
		{"acme", true, true, ""},
		{"Zürich \uFFFD", true, true, ""},
		{strings.Repeat("k", 255), true, true, ""},
		{strings.Repeat("k", 256), false, false, ""},
		{"k\x00zzz", false, false, "0x00 at byte 1"},
		{"k\tz", false, false, "0x09 at byte 1"},
		{"k\x7f", false, false, "0x7f at byte 1"},
		{"\xff", false, false, "0xff at byte 0"},
		{"ab\xc3", false, false, "0xc3 at byte 2"},
		{"\xed\xa0\x80", false, false, "0xed at byte 0"}, // a surrogate, not UTF-8
	} {
		party, key := CheckParty("from", tt.s), CheckKey("idempotency_key", tt.s)
		if (party == nil) != tt.party || (key == nil) != tt.key {
			t.Errorf("%q: CheckParty %v, CheckKey %v", tt.s, party, key)
		}
		var fe *FieldError
		if key != nil && (!errors.As(key, &fe) || fe.Field != "idempotency_key" || !strings.Contains(fe.Problem, tt.problemNames)) {
			t.Errorf("%q: CheckKey %v, want it to name idempotency_key and %q", tt.s, key, tt.problemNames)
		}
	}
}

// TestConfigHoldsNoNul: a target's and a source's config is a JSON object
// whose names and strings hold no NUL, found at any depth and named by
// its path; an escaped backslash before u0000 is no NUL.
func TestConfigHoldsNoNul(t *testing.T) {
	for _, tt := range []struct{ config, field string }{
		{`{"dir":"/tmp"}`, ""},
		{`{"dir":"\\u0000"}`, ""},
		{`[]`, "config"},
		{`null`, "config"},
		{`{"dir":"/tmp\u0000"}`, "config.dir"},
		{`{"a":{"b":[1,"x","\u0000"]}}`, "config.a.b[2]"},
		{`{"a\u0000":1}`, "config.a\x00"},
	} {
		target := Target{Name: "out", Kind: "file", Config: json.RawMessage(tt.config)}.WithDefaults()
		target.Config = json.RawMessage(tt.config)
		for what, err := range map[string]error{"target": target.Validate(),
			"source": Source{Name: "in", Kind: "directory", Config: json.RawMessage(tt.config)}.Validate()} {
			var fe *FieldError
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("%s config %s: %v", what, tt.config, err)
			case tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field):
				t.Errorf("%s config %s: %v, want a refusal of %s", what, tt.config, err, tt.field)
			}
		}
	}
}
