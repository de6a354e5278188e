package sources_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

func fields(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *lifecycle.FieldError:
			out = append(out, e.Field)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	slices.Sort(out)
	return out
}

// TestPrepareFillsDefaults: a source with only its required fields gets
// every default written in.
func TestPrepareFillsDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind, config, want string
	}{
		{sources.KindDirectory, `{"dir": "/var/in/", "from": "acme", "to": "globex"}`,
			`{"dir":"/var/in","pattern":"*","from":"acme","to":"globex","content_type":"application/octet-stream","interval":"2s","settle":"2s","after":"move","done_dir":"/var/in/done"}`},
		{sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "after": "delete", "settle": "1ms"}`,
			`{"dir":"/in","pattern":"*","from":"a","to":"b","content_type":"application/octet-stream","interval":"2s","settle":"1ms","after":"delete"}`},
		{sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "done_dir": "/in/errors"}`,
			`{"dir":"/in","pattern":"*","from":"a","to":"b","content_type":"application/octet-stream","interval":"2s","settle":"2s","after":"move","done_dir":"/in/errors"}`},
		{sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "type": "invoice.created", "headers": {"X-Tenant": "acme"}}`,
			`{"dir":"/in","pattern":"*","from":"a","to":"b","content_type":"application/octet-stream","type":"invoice.created","headers":{"x-tenant":"acme"},"interval":"2s","settle":"2s","after":"move","done_dir":"/in/done"}`},
		{sources.KindInboxTable, `{"database_url": "postgres://u:p@db/x", "table": "inbox.cminmsgs", "id_column": "id",
			"payload_column": "body", "from_column": "sender", "to_column": "receiver", "processed_column": "date_processed"}`,
			`{"database_url":"postgres://u:p@db/x","table":"inbox.cminmsgs","id_column":"id","payload_column":"body","from_column":"sender","to_column":"receiver","processed_column":"date_processed","content_type":"application/octet-stream","interval":"1s","batch":500,"max_commit_delay":"5m0s","force_marker_after":"24h0m0s"}`},
	} {
		s, err := sources.Prepare(lifecycle.Source{Name: "in", Kind: tc.kind, Config: json.RawMessage(tc.config)})
		if err != nil {
			t.Fatalf("%s: %v", tc.config, err)
		}
		if string(s.Config) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.config, s.Config, tc.want)
		}
	}
}

// TestPrepareNamesEveryWrongField: each problem is a field error naming
// its field, all of them at once.
func TestPrepareNamesEveryWrongField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, kind, config string
		want               []string
	}{
		{"in", "ftp", `{}`, []string{"kind"}},
		{"In", "ftp", `{}`, []string{"kind", "name"}},
		{"in", sources.KindDirectory, `[]`, []string{"config"}},
		{"in", sources.KindDirectory, `{}`, []string{"config.dir", "config.from", "config.to"}},
		{"in", sources.KindDirectory, `{"dir": "in", "from": "a", "to": "b", "pattern": "[", "after": "keep", "interval": "1h1s", "settle": 3}`,
			[]string{"config.after", "config.dir", "config.interval", "config.pattern", "config.settle"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "after": "delete", "done_dir": "/done"}`, []string{"config.done_dir"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "done_dir": "/in/"}`, []string{"config.done_dir"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "done_dir": "/in/.processing"}`, []string{"config.done_dir"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "done_dir": "/in/.processing/done"}`, []string{"config.done_dir"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "done_dir": "/in/error/"}`, []string{"config.done_dir"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "done_dir": "/in/x/../error/done"}`, []string{"config.done_dir"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "url": "x"}`, []string{"config.url"}},
		{"in", sources.KindInboxTable, `{}`, []string{"config.database_url", "config.from_column", "config.id_column",
			"config.payload_column", "config.processed_column", "config.table", "config.to_column"}},
		{"in", sources.KindInboxTable, `{"database_url": "mysql://x", "table": "a.b.c", "id_column": "id", "payload_column": "1x",
			"from_column": "f", "to_column": "t", "processed_column": "id", "batch": 0, "max_commit_delay": "0.5s", "ordering_key_column": "k-y"}`,
			[]string{"config.database_url", "config.max_commit_delay", "config.ordering_key_column", "config.payload_column",
				"config.processed_column", "config.table"}},
		{"in", sources.KindInboxTable, `{"database_url": "postgres://h/d", "table": "t", "id_column": "id", "payload_column": "p",
			"from_column": "f", "to_column": "t", "processed_column": "d", "batch": 10001}`, []string{"config.batch"}},
		{"in", sources.KindDirectory, `{"dir": "/in", "from": "a", "to": "b", "type": "invoice created", "headers": {"X-A": "1", "x-a": "2"}}`,
			[]string{"config.headers.x-a", "config.type"}},
		{"in", sources.KindInboxTable, `{"database_url": "postgres://h/d", "table": "t", "id_column": "id", "payload_column": "p",
			"from_column": "f", "to_column": "t", "processed_column": "d", "headers": {"x tenant": "a"}, "type": 7}`,
			[]string{"config.headers", "config.type"}},
	} {
		_, err := sources.Prepare(lifecycle.Source{Name: tc.name, Kind: tc.kind, Config: json.RawMessage(tc.config)})
		if got := fields(err); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s: fields %v, want %v (%v)", tc.kind, tc.config, got, tc.want, err)
		}
	}
}

// TestDatabaseURLProblemHidesThePassword: the field error does not repeat
// a URL that may hold a password.
func TestDatabaseURLProblemHidesThePassword(t *testing.T) {
	t.Parallel()
	_, err := sources.Prepare(lifecycle.Source{Name: "in", Kind: sources.KindInboxTable,
		Config: json.RawMessage(`{"database_url": "postgres://u:s3cret@host:99999999/d"}`)})
	var fe *lifecycle.FieldError
	if !errors.As(err, &fe) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v", err)
	}
}

func TestReadConfigOfAPreparedSource(t *testing.T) {
	t.Parallel()
	s, err := sources.Prepare(lifecycle.Source{Name: "in", Kind: sources.KindDirectory,
		Config: json.RawMessage(`{"dir": "/in", "from": "a", "to": "b"}`)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := sources.Directory(s)
	if err != nil || cfg.DoneDir != "/in/done" || cfg.Settle.D().Seconds() != 2 {
		t.Fatalf("%+v %v", cfg, err)
	}
	if _, err := sources.Inbox(s); err == nil {
		t.Error("a directory source read as an inbox")
	}
}
