package console_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

func TestSourcesPagesShowTheStatusAndNoPassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inbox(t, "aodb")
	b.source(t, "drop", "directory", false, `{"dir": "/var/spool/in", "from": "acme", "to": "globex"}`)
	for _, token := range []string{b.admin, b.reader} {
		c := b.signedIn(t, token)
		c.get(t, "/ui/sources").want(t, http.StatusOK).has(t, `href="/ui/sources/aodb"`, `href="/ui/sources/drop"`, "inbox_table",
			"directory", "waybill-1", "2026-12-01T08:00:00Z", ">12<", "inbox database: connection refused", "Disabled",
			`aria-current="page">Sources`).lacks(t, "s3cret")
		c.get(t, "/ui/sources/aodb").want(t, http.StatusOK).has(t, "<h1>Source aodb</h1>", "waybill-1", "2026-12-01T08:00:30Z",
			"4711: every id up to it", "Markers owed</dt><dd>0", "at 2026-12-01T07:00:00Z",
			html.EscapeString(`"postgres://waybill:***@inbox.example:5432/aodb"`), html.EscapeString(`"batch": 500`),
			`href="/ui/messages?source=aodb"`).lacks(t, "s3cret")
		c.get(t, "/ui/sources/drop").want(t, http.StatusOK).has(t, "no process holds its lease", "Last poll</dt><dd>never",
			html.EscapeString(`"dir": "/var/spool/in"`)).lacks(t, "Watermark")
	}
	// The API gives the same status.
	c := b.signedIn(t, b.admin)
	defs, err := b.w.Sources(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	items, err := httpapi.SourcesOf(b.ctx, b.db, defs)
	if err != nil || len(items) != 2 || *items[0].Status.Holder != "waybill-1" || items[0].Status.Backlog != 12 {
		t.Fatalf("the API's sources %+v, %v", items, err)
	}
	c.get(t, "/ui/sources/aodb/edit").want(t, http.StatusOK).lacks(t, "s3cret")
}

func TestSourceAddEditEnableDisableDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/sources").want(t, http.StatusOK).has(t, "No sources yet", `href="/ui/sources?add=directory#add"`,
		`href="/ui/sources?add=inbox_table#add"`).lacks(t, `action="/ui/sources"`)
	// The form of a kind has the kind's fields, each on its own.
	c.get(t, "/ui/sources?add=inbox_table").want(t, http.StatusOK).has(t, `action="/ui/sources"`, `name="kind" value="inbox_table"`,
		`name="config.database_url"`, `name="config.id_column"`, `type="number" id="config.batch"`, `<textarea id="config.headers"`).
		lacks(t, `name="config.dir"`, `name="config.verify"`)
	c.get(t, "/ui/sources?add=directory").want(t, http.StatusOK).has(t, `name="config.dir"`, `<option value="move" selected>`)
	c.get(t, "/ui/sources?add=ftp").want(t, http.StatusBadRequest).has(t, "<code>add</code>", "inbox_table")

	// Added: each problem named as the API names it, under its field, and
	// nothing written.
	before, changes := b.journalLength(t), b.changes.Load()
	c.post(t, "/ui/sources", url.Values{"name": {"Bad Name"}, "kind": {"ftp"}}).want(t, http.StatusBadRequest).
		has(t, "<code>name</code>", "<code>kind</code>")
	c.post(t, "/ui/sources", url.Values{"name": {"Bad Name"}, "kind": {"directory"}, "config.dir": {"/in"}}).want(t, http.StatusBadRequest).
		has(t, "<code>name</code>", `value="Bad Name"`, `id="name-hint"><strong>`, `value="/in"`)
	c.post(t, "/ui/sources", url.Values{"name": {"drop"}, "kind": {"directory"}, "enabled": {"on"},
		"config.dir": {"in"}, "config.from": {"acme"}}).want(t, http.StatusBadRequest).
		has(t, "<code>config.dir</code>", "<code>config.to</code>", `id="config.dir-hint"><strong>&#34;in&#34; is not an absolute path</strong>`,
			`<input type="text" id="config.to" name="config.to" value="" aria-describedby="config.to-hint" aria-invalid="true">`)
	c.post(t, "/ui/sources", url.Values{"name": {"in"}, "kind": {"inbox_table"}, "config.database_url": {inboxURL}, "config.table": {"t"}}).
		want(t, http.StatusBadRequest).has(t, "<code>config.id_column</code>", "***").lacks(t, "s3cret")
	if b.journalLength(t) != before || b.changes.Load() != changes {
		t.Fatal("a refused source changed the journal")
	}
	c.post(t, "/ui/sources", url.Values{"name": {"drop"}, "kind": {"directory"}, "enabled": {"on"},
		"config.dir": {"/var/spool/in"}, "config.from": {"acme"}, "config.to": {"globex"}, "config.after": {"move"}}).redirects(t, "/ui/sources/drop")
	c.get(t, "/ui/sources/drop").has(t, "Source drop added.", "Enabled", html.EscapeString(`"settle": "2s"`))
	b.lastChange(t, "source.created", "operator:alice")
	// Its name is taken now: the API's words.
	c.post(t, "/ui/sources", url.Values{"name": {"drop"}, "kind": {"directory"}, "config.dir": {"/x"}, "config.from": {"a"}, "config.to": {"b"}}).
		want(t, http.StatusConflict)

	// Edited: the whole definition replaced, its kind kept; the form
	// holds the stored configuration, field by field.
	c.get(t, "/ui/sources/drop/edit").want(t, http.StatusOK).has(t, `name="enabled" checked`, `name="config.pattern" value="*"`,
		`name="config.done_dir" value="/var/spool/in/done"`)
	edit := url.Values{"config.dir": {"/var/spool/in"}, "config.from": {"acme"}, "config.to": {"globex"}, "config.after": {"burn"}}
	c.post(t, "/ui/sources/drop/edit", edit).
		want(t, http.StatusBadRequest).has(t, "<code>config.after</code>", `<select id="config.after" name="config.after" aria-describedby="config.after-hint" aria-invalid="true">`)
	edit.Set("enabled", "on")
	edit.Set("config.after", "move")
	edit.Set("config.pattern", "*.xml")
	c.post(t, "/ui/sources/drop/edit", edit).redirects(t, "/ui/sources/drop")
	c.get(t, "/ui/sources/drop").has(t, "Source drop saved.", html.EscapeString(`"pattern": "*.xml"`))
	if b.changes.Load() != changes+2 {
		t.Errorf("%d changes announced, want 2", b.changes.Load()-changes)
	}

	// Disabled and enabled again, each asked first.
	before = b.journalLength(t)
	c.get(t, "/ui/sources/drop/disable").want(t, http.StatusOK).has(t, "Disable source drop?", `class="danger" autofocus>Disable</button>`)
	if b.journalLength(t) != before {
		t.Fatal("asking changed the journal")
	}
	c.post(t, "/ui/sources/drop/disable", nil).redirects(t, "/ui/sources/drop")
	b.lastChange(t, "source.updated", "operator:alice")
	c.get(t, "/ui/sources").has(t, "Source drop is disabled.", `href="/ui/sources/drop/enable"`)
	if s := b.sourceNamed(t, "drop"); s.Enabled || !strings.Contains(string(s.Config), `"*.xml"`) {
		t.Errorf("after the disable %+v", s)
	}
	c.get(t, "/ui/sources/drop/enable").want(t, http.StatusOK).has(t, "Enable source drop?")
	c.post(t, "/ui/sources/drop/enable", nil).redirects(t, "/ui/sources/drop")
	if !b.sourceNamed(t, "drop").Enabled {
		t.Error("not enabled")
	}

	// Deleted, after its confirmation; then it is not found.
	c.get(t, "/ui/sources/drop/delete").want(t, http.StatusOK).has(t, "Delete source drop?", "never written")
	c.post(t, "/ui/sources/drop/delete", nil).redirects(t, "/ui/sources")
	c.get(t, "/ui/sources").has(t, "Source drop deleted.", "No sources yet")
	c.post(t, "/ui/sources/drop/delete", nil).want(t, http.StatusNotFound)
	b.lastChange(t, "source.deleted", "operator:alice")
}

func TestSourceEditKeepsTheHiddenPassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.inbox(t, "aodb")
	c := b.signedIn(t, b.admin)
	page := c.get(t, "/ui/sources/aodb/edit").want(t, http.StatusOK).lacks(t, "s3cret").body
	// The form as the page holds it, each field's value.
	form := url.Values{"enabled": {"on"}}
	for _, m := range regexp.MustCompile(`name="(config\.[a-z_]+)" value="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	shown := form.Get("config.database_url")
	if !strings.Contains(shown, "***") {
		t.Fatalf("the form shows the database URL %q", shown)
	}

	// Sent back as shown, with a change beside it: the password stays.
	form.Set("config.batch", "100")
	c.post(t, "/ui/sources/aodb/edit", form).redirects(t, "/ui/sources/aodb")
	if s := b.sourceNamed(t, "aodb"); !strings.Contains(string(s.Config), inboxURL) || !strings.Contains(string(s.Config), `"batch": 100`) {
		t.Fatalf("after the edit %s", s.Config)
	}
	// The URL changed around the hidden password: refused, nothing written.
	before := b.journalLength(t)
	form.Del("enabled")
	form.Set("config.database_url", strings.Replace(shown, "inbox.example", "inbox2.example", 1))
	c.post(t, "/ui/sources/aodb/edit", form).
		want(t, http.StatusBadRequest).has(t, "<code>config.database_url</code>: holds the hidden password").lacks(t, "s3cret")
	if b.journalLength(t) != before {
		t.Error("a refused edit changed the journal")
	}
	// Written whole, the new one is taken, and not shown either.
	form.Set("config.database_url", strings.Replace(shown, "waybill:***@inbox.example", "waybill:n3w-pw@inbox2.example", 1))
	c.post(t, "/ui/sources/aodb/edit", form).redirects(t, "/ui/sources/aodb")
	if s := b.sourceNamed(t, "aodb"); !strings.Contains(string(s.Config), "waybill:n3w-pw@inbox2.example") || s.Enabled {
		t.Fatalf("after the edit %+v", s)
	}
	c.get(t, "/ui/sources/aodb").has(t, "inbox2.example").lacks(t, "n3w-pw")
}

// lastChange fails the test unless the configuration's last event is of
// the kind, by the actor.
func (b *bundle) lastChange(t testing.TB, kind journal.Kind, actor string) {
	t.Helper()
	events, err := journal.Stream(b.ctx, b.db, journal.ConfigStream)
	if err != nil || len(events) == 0 {
		t.Fatalf("the config stream: %d events, %v", len(events), err)
	}
	if e := events[len(events)-1]; e.Kind() != kind || e.Actor != actor {
		t.Errorf("the last change is %s by %s, want %s by %s", e.Kind(), e.Actor, kind, actor)
	}
}

// sourceNamed is the stored source of that name.
func (b *bundle) sourceNamed(t testing.TB, name string) lifecycle.Source {
	t.Helper()
	ss, err := b.w.Sources(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no source %s", name)
	return lifecycle.Source{}
}

// TestWebhookSourceEditKeepsTheHiddenSecrets: a webhook's secrets are
// shown masked, in the JSON of its verify; sent back so, they stay.
func TestWebhookSourceEditKeepsTheHiddenSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateSource(b.ctx, lifecycle.Source{Name: "hub", Kind: "webhook", Enabled: true,
		Config: json.RawMessage(`{"verify": {"scheme": "github", "secrets": ["s3cret-one", "s3cret-two"]}}`)}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/sources/hub").want(t, http.StatusOK).lacks(t, "s3cret")
	page := c.get(t, "/ui/sources/hub/edit").want(t, http.StatusOK).lacks(t, "s3cret").body
	m := regexp.MustCompile(`name="config\.verify"[^>]*>([^<]*)</textarea>`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(m[1], "***") {
		t.Fatalf("the form's verify: %v", m)
	}
	form := url.Values{"enabled": {"on"}, "config.verify": {html.UnescapeString(m[1])}, "config.from": {"github"}}
	c.post(t, "/ui/sources/hub/edit", form).redirects(t, "/ui/sources/hub")
	var stored struct {
		Verify struct{ Secrets []string }
		From   string
	}
	s := b.sourceNamed(t, "hub")
	if err := json.Unmarshal(s.Config, &stored); err != nil || strings.Join(stored.Verify.Secrets, " ") != "s3cret-one s3cret-two" ||
		stored.From != "github" {
		t.Fatalf("after the edit %s", s.Config)
	}
	form.Set("config.verify", `{"scheme": "github", "secrets": ["***", "***", "***"]}`)
	c.post(t, "/ui/sources/hub/edit", form).want(t, http.StatusBadRequest).has(t, "config.verify.secrets[2]").lacks(t, "s3cret")
}
