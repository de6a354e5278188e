package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
)

func TestSources(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Every problem of the configuration at once, by field; nothing made.
	e := b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "drop", "kind": "directory",
		"config": map[string]any{"dir": "relative", "after": "keep"}}).fails(t, http.StatusBadRequest, httpapi.CodeInvalidField)
	fields := map[string]bool{}
	for _, p := range e.Details.Errors {
		fields[p.Field] = true
	}
	for _, f := range []string{"config.dir", "config.from", "config.to", "config.after"} {
		if !fields[f] {
			t.Errorf("%s not reported: %+v", f, e.Details.Errors)
		}
	}
	b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "drop", "kind": "ftp", "config": map[string]any{}}).invalidField(t, "kind")
	b.as(t, ingestToken, http.MethodPost, "/sources", map[string]any{"name": "drop"}).fails(t, http.StatusForbidden, httpapi.CodeForbidden)

	// Only the required fields: enabled, every default filled, no status
	// yet.
	var created httpapi.Source
	r := b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "drop", "kind": "directory",
		"config": map[string]any{"dir": "/var/spool/in", "from": "erp", "to": "billing"}}).want(t, http.StatusCreated, &created)
	var cfg map[string]any
	if err := json.Unmarshal(created.Config, &cfg); err != nil || cfg["done_dir"] != "/var/spool/in/done" || cfg["settle"] != "2s" {
		t.Errorf("config %s", created.Config)
	}
	if r.header.Get("Location") != httpapi.Prefix+"/sources/drop" || !created.Enabled || created.Status.Holder != nil ||
		created.Status.LastPollAt != nil || created.Status.Watermark != nil || created.Status.MarkersOwed != nil {
		t.Errorf("created %+v", created)
	}
	b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "drop", "kind": "directory",
		"config": map[string]any{"dir": "/in", "from": "a", "to": "b"}}).fails(t, http.StatusConflict, httpapi.CodeAlreadyExists)

	// A source read, changed and sent back as it is: its status is
	// ignored.
	read := b.admin(t, http.MethodGet, "/sources/drop", nil).want(t, http.StatusOK, nil).body
	var back map[string]any
	if err := json.Unmarshal(read, &back); err != nil {
		t.Fatal(err)
	}
	back["enabled"] = false
	var updated httpapi.Source
	b.admin(t, http.MethodPut, "/sources/drop", back).want(t, http.StatusOK, &updated)
	if updated.Enabled {
		t.Errorf("sent back disabled: %+v", updated)
	}
	back["enabled"] = true
	b.admin(t, http.MethodPut, "/sources/drop", back).want(t, http.StatusOK, nil)

	// An inbox shows its watermark and markers; the state a poll records
	// shows as the status.
	b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "ciims", "kind": "inbox_table", "enabled": false,
		"config": map[string]any{"database_url": "postgres://waybill:s3cret@inbox.example/aodb", "table": "cminmsgs", "id_column": "id",
			"payload_column": "body", "from_column": "sender", "to_column": "receiver", "processed_column": "date_processed"}}).
		want(t, http.StatusCreated, nil)
	at := start.Add(time.Minute)
	if _, err := b.db.Exec(b.ctx, `UPDATE source_state SET holder = 'host:1:ab', lease_end = $1, last_poll_at = $1,
		last_error = 'inbox away', last_error_at = $1, backlog = 7, watermark = 41 WHERE name = 'ciims'`, at); err != nil {
		t.Fatal(err)
	}
	var list httpapi.SourceList
	b.as(t, readerToken, http.MethodGet, "/sources", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0].Name != "ciims" || list.Items[1].Name != "drop" {
		t.Fatalf("list %+v", list)
	}
	var got httpapi.Source
	b.as(t, readerToken, http.MethodGet, "/sources/ciims", nil).want(t, http.StatusOK, &got)
	// A reader sees where an inbox connects, not its password; an admin,
	// who writes the definition, sees it whole.
	for _, cfg := range []json.RawMessage{list.Items[0].Config, got.Config} {
		if strings.Contains(string(cfg), "s3cret") || !strings.Contains(string(cfg), "postgres://waybill:***@inbox.example/aodb") {
			t.Errorf("a reader sees the config %s", cfg)
		}
	}
	var whole httpapi.Source
	b.admin(t, http.MethodGet, "/sources/ciims", nil).want(t, http.StatusOK, &whole)
	if !strings.Contains(string(whole.Config), "s3cret") {
		t.Errorf("an admin sees the config %s", whole.Config)
	}
	// The journal's source.created holds the definition; a reader sees it
	// masked there too, an admin whole. A page may end early while another
	// test's transaction is open (transaction ids are the whole server's),
	// so read on until it comes.
	for token, whole := range map[string]bool{readerToken: false, adminToken: true} {
		var found *httpapi.JournalEvent
		cursor := ""
		testpoll.Until(t, "source.created of ciims in the journal", func() bool {
			var page httpapi.JournalPage
			b.as(t, token, http.MethodGet, "/journal?limit=1000&cursor="+url.QueryEscape(cursor), nil).want(t, http.StatusOK, &page)
			if i := slices.IndexFunc(page.Items, func(e httpapi.JournalEvent) bool {
				return e.Kind == journal.KindSourceCreated && strings.Contains(string(e.Payload), "inbox.example")
			}); i >= 0 {
				found = &page.Items[i]
			}
			cursor = page.NextCursor
			return found != nil
		})
		if p := string(found.Payload); strings.Contains(p, "s3cret") != whole ||
			!whole && !strings.Contains(p, "postgres://waybill:***@inbox.example/aodb") {
			t.Errorf("%s sees the journal's source.created as %s", token, p)
		}
	}
	st := got.Status
	if got.Enabled || st.Holder == nil || *st.Holder != "host:1:ab" || !st.LastPollAt.Equal(at) || *st.LastError != "inbox away" ||
		st.Backlog != 7 || *st.Watermark != 41 || *st.MarkersOwed != 0 {
		t.Errorf("status %+v", st)
	}

	// A replace keeps enabled unless it says, takes the path's name and
	// cannot rename.
	got = httpapi.Source{}
	b.admin(t, http.MethodPut, "/sources/drop", map[string]any{"kind": "directory",
		"config": map[string]any{"dir": "/var/spool/in", "from": "erp", "to": "billing", "after": "delete"}}).want(t, http.StatusOK, &got)
	if !got.Enabled || got.Name != "drop" {
		t.Errorf("replaced %+v", got)
	}
	b.admin(t, http.MethodPut, "/sources/drop", map[string]any{"name": "other", "kind": "directory",
		"config": map[string]any{"dir": "/in", "from": "a", "to": "b"}}).invalidField(t, "name")
	b.admin(t, http.MethodPut, "/sources/ghost", map[string]any{"kind": "directory",
		"config": map[string]any{"dir": "/in", "from": "a", "to": "b"}}).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodGet, "/sources/Bad", nil).invalidField(t, "name")

	b.admin(t, http.MethodDelete, "/sources/ciims", nil).want(t, http.StatusNoContent, nil)
	b.admin(t, http.MethodGet, "/sources/ciims", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodDelete, "/sources/ciims", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM source_state WHERE name = 'ciims'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the deleted source's state stays: %d %v", n, err)
	}
	if got := b.changes.Load(); got != 6 {
		t.Errorf("%d configuration changes told, want 6", got)
	}
}

// TestConfigWithANulIs400: a target's or a source's config that holds a
// NUL, which the database cannot keep, is 400 naming where it is, on a
// create and an update alike, and changes nothing.
func TestConfigWithANulIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "drop", "kind": "directory",
		"config": map[string]any{"dir": "/var/spool/in", "from": "erp", "to": "billing"}}).want(t, http.StatusCreated, nil)
	before := b.counts(t)
	for _, c := range []struct{ method, path, body, field string }{
		{http.MethodPost, "/targets", `{"name":"out","kind":"file","config":{"dir":"/tmp/\u0000"}}`, "config.dir"},
		{http.MethodPut, "/targets/billing", `{"kind":"http","config":{"url":"http://127.0.0.1:9/","headers":{"X-A":"a"},"x":["a","\u0000"]}}`, "config.x[1]"},
		{http.MethodPost, "/sources", `{"name":"in","kind":"directory","config":{"dir":"/in\u0000","from":"erp","to":"billing"}}`, "config.dir"},
		{http.MethodPut, "/sources/drop", `{"kind":"directory","config":{"dir":"/var/spool/in","from":"erp","to":"billing","\u0000":1}}`, "config.\x00"},
	} {
		b.send(t, adminToken, c.method, c.path, "application/json", []byte(c.body)).invalidField(t, c.field)
	}
	b.unchanged(t, before)
}
