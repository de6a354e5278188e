package console

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/waybill/waybill/commands"
)

func TestShowConfigMasksTheDatabaseURL(t *testing.T) {
	t.Parallel()
	got := showConfig(json.RawMessage(`{"database_url":"postgres://u:s3cret@db/x","table":"inbox"}`))
	if strings.Contains(got, "s3cret") || !strings.Contains(got, `"postgres://u:***@db/x"`) || !strings.Contains(got, `"table": "inbox"`) {
		t.Errorf("showConfig: %s", got)
	}
	// Without a password, the configuration is shown as it is.
	if got := showConfig(json.RawMessage(`{"dir":"/in","from":"a"}`)); got != "{\n  \"dir\": \"/in\",\n  \"from\": \"a\"\n}" {
		t.Errorf("showConfig: %s", got)
	}
	if got := showConfig(json.RawMessage(`not json`)); got != "not json" {
		t.Errorf("showConfig: %s", got)
	}
}

func TestKeepPassword(t *testing.T) {
	t.Parallel()
	stored := json.RawMessage(`{"database_url":"postgres://u:s3cret@db/x","table":"inbox"}`)
	for _, tc := range []struct {
		name, sent, want string
		refused          bool
	}{
		{"left as shown", `{"database_url":"postgres://u:***@db/x","table":"other"}`,
			`{"database_url":"postgres://u:s3cret@db/x","table":"other"}`, false},
		{"written whole", `{"database_url":"postgres://u:new@db2/x","table":"inbox"}`,
			`{"database_url":"postgres://u:new@db2/x","table":"inbox"}`, false},
		{"changed around the mask", `{"database_url":"postgres://u:***@db2/x"}`, "", true},
		{"without a password", `{"database_url":"postgres://u@db/x"}`, `{"database_url":"postgres://u@db/x"}`, false},
		{"not json", `{`, `{`, false},
	} {
		got, err := keepPassword(json.RawMessage(tc.sent), stored)
		switch {
		case tc.refused:
			if !errors.Is(err, commands.ErrInvalid) || !strings.Contains(err.Error(), "config.database_url") {
				t.Errorf("%s: %s, %v", tc.name, got, err)
			}
		case err != nil || string(got) != tc.want:
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestKeepSecrets(t *testing.T) {
	t.Parallel()
	stored := json.RawMessage(`{"verify":{"scheme":"github","secrets":["s3cret","s4cret"]},"from":"gh"}`)
	for _, tc := range []struct {
		name, sent, want string
		refused          string
	}{
		{"left as shown", `{"verify":{"scheme":"github","secrets":["***","***"]},"from":"hub"}`,
			`{"from":"hub","verify":{"scheme":"github","secrets":["s3cret","s4cret"]}}`, ""},
		{"one dropped, one added", `{"verify":{"scheme":"github","secrets":["***","new"]}}`,
			`{"verify":{"scheme":"github","secrets":["s3cret","new"]}}`, ""},
		{"one secret", `{"verify":{"scheme":"github","secret":"***"}}`, `{"verify":{"scheme":"github","secret":"s3cret"}}`, ""},
		{"a mask with no secret behind it", `{"verify":{"scheme":"github","secrets":["***","***","***"]}}`, "", "config.verify.secrets[2]"},
		{"no secrets", `{"dir":"/in"}`, `{"dir":"/in"}`, ""},
	} {
		got, err := keepSecrets(json.RawMessage(tc.sent), stored)
		switch {
		case tc.refused != "":
			if !errors.Is(err, commands.ErrInvalid) || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: %s, %v", tc.name, got, err)
			}
		case err != nil || string(got) != tc.want:
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	if _, err := keepSecrets(json.RawMessage(`{"verify":{"scheme":"github","secret":"***"}}`), nil); err == nil {
		t.Error("a new source took a masked secret")
	}
}
