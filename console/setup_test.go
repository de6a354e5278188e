package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/console"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// quiet keeps the logs to warnings and errors.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// start is the test clock's first time.
var start = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// bundle is what a test of the console works with: a fresh database, a
// Writer on a clock that moves only when the test says, a token of each
// role, and the console served over HTTP.
type bundle struct {
	ctx     context.Context
	db      *pgxpool.Pool
	clock   *testclock.Clock
	w       *commands.Writer
	tokens  *auth.Store
	console *console.Console
	srv     *httptest.Server
	changes atomic.Int32
	// panicOnChange makes the console's OnConfigChange panic, as a bug in
	// a handler would.
	panicOnChange atomic.Bool
	// The tokens, one per role.
	admin, reader, ingester string
}

func setup(t testing.TB) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), clock: testclock.New(start)}
	b.db = dbtest.Pool(t)
	var err error
	if b.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now, Logger: quiet}, DB: b.db}); err != nil {
		t.Fatal(err)
	}
	b.tokens = auth.NewStore(b.db, b.clock.Now)
	for _, tk := range []struct {
		into *string
		name string
		role auth.Role
	}{{&b.admin, "alice", auth.RoleAdmin}, {&b.reader, "rita", auth.RoleReader}, {&b.ingester, "erp-feed", auth.RoleIngest}} {
		if *tk.into, err = b.tokens.Create(b.ctx, tk.name, tk.role); err != nil {
			t.Fatal(err)
		}
	}
	b.console = b.newConsole(t)
	b.srv = httptest.NewServer(b.console)
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() { b.console.Stop(context.Background()) })
	return b
}

// newConsole is a console on the bundle's database, as another server
// process would have it.
func (b *bundle) newConsole(t testing.TB) *console.Console {
	t.Helper()
	return b.consoleWith(t, func(*console.Config) {})
}

// consoleWith is newConsole with its configuration changed by edit.
func (b *bundle) consoleWith(t testing.TB, edit func(*console.Config)) *console.Console {
	t.Helper()
	cfg := console.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db, Tokens: b.tokens,
		LivePoll: 20 * time.Millisecond, OnConfigChange: func() {
			if b.panicOnChange.Load() {
				panic("boom")
			}
			b.changes.Add(1)
		}}
	edit(&cfg)
	c, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// target creates an enabled http target and a route to it from source erp
// for any parties.
func (b *bundle) target(t testing.TB, name string) {
	t.Helper()
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: name}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
}

// fifo creates an enabled http target that keeps the order of each
// ordering key, on_failure block, and a route to it from source shop for
// any parties.
func (b *bundle) fifo(t testing.TB, name string) {
	t.Helper()
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: name, Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`), Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingFIFO}},
		"operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "shop", From: "*", To: "*", Target: name}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
}

// ingestKeyed takes in a text message from source with an ordering key.
func (b *bundle) ingestKeyed(t testing.TB, source, key, payload string) *projection.Message {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: source, From: "acme", To: "globex",
		ContentType: "text/plain; charset=utf-8", Payload: []byte(payload), OrderingKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ingest takes in a text message from erp.
func (b *bundle) ingest(t testing.TB, payload string) *projection.Message {
	t.Helper()
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
		ContentType: "text/plain; charset=utf-8", Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// settle claims a delivery and records the outcome, as its worker would.
func (b *bundle) settle(t testing.TB, deliveryID uuid.UUID, outcome lifecycle.Outcome) *projection.Message {
	t.Helper()
	c, err := b.w.Claim(b.ctx, deliveryID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.w.Complete(b.ctx, deliveryID, c.Token, outcome)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// journalLength is the number of events, to check an answer changed
// nothing.
func (b *bundle) journalLength(t testing.TB) int {
	t.Helper()
	n, err := journal.LastPosition(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// client is a browser without scripts: it keeps cookies, follows no
// redirect on its own, and sends the CSRF token of the last page it read
// with every form.
type client struct {
	b    *bundle
	base string
	http *http.Client
	csrf string
	// version is the message version the last page's form carries, ""
	// when it carries none.
	version string
}

// answer is a page or another answer of the console.
type answer struct {
	status int
	header http.Header
	body   string
}

func (b *bundle) client(t testing.TB) *client {
	t.Helper()
	return b.clientOf(t, b.srv)
}

func (b *bundle) clientOf(t testing.TB, srv *httptest.Server) *client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	// A copy: the server's client is one for all its callers.
	hc := *srv.Client()
	hc.Jar = jar
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{b: b, base: srv.URL, http: &hc}
}

// signedIn is a client signed in with token.
func (b *bundle) signedIn(t testing.TB, token string) *client {
	t.Helper()
	c := b.client(t)
	c.signIn(t, token).want(t, http.StatusSeeOther)
	return c
}

var (
	csrfField    = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	versionField = regexp.MustCompile(`name="version" value="([^"]+)"`)
)

func (c *client) do(t testing.TB, req *http.Request) *answer {
	t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := &answer{status: resp.StatusCode, header: resp.Header, body: string(body)}
	if m := csrfField.FindStringSubmatch(a.body); m != nil {
		c.csrf = m[1]
	}
	c.version = ""
	if m := versionField.FindStringSubmatch(a.body); m != nil {
		c.version = m[1]
	}
	return a
}

func (c *client) get(t testing.TB, path string) *answer {
	t.Helper()
	req, err := http.NewRequestWithContext(c.b.ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.do(t, req)
}

// post sends the form with the CSRF token and the message version of the
// last page read, as its form would, unless the form has its own.
func (c *client) post(t testing.TB, path string, form url.Values) *answer {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if !form.Has("csrf") {
		form.Set("csrf", c.csrf)
	}
	if !form.Has("version") && c.version != "" {
		form.Set("version", c.version)
	}
	req, err := http.NewRequestWithContext(c.b.ctx, http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(t, req)
}

// signIn posts token on the sign-in form.
func (c *client) signIn(t testing.TB, token string) *answer {
	t.Helper()
	c.get(t, "/ui/signin").want(t, http.StatusOK)
	return c.post(t, "/ui/signin", url.Values{"token": {token}})
}

// want fails the test unless the status is want.
func (a *answer) want(t testing.TB, want int) *answer {
	t.Helper()
	if a.status != want {
		t.Fatalf("status %d, want %d:\n%s", a.status, want, a.body)
	}
	return a
}

// has fails the test unless the body holds every text.
func (a *answer) has(t testing.TB, texts ...string) *answer {
	t.Helper()
	for _, s := range texts {
		if !strings.Contains(a.body, s) {
			t.Errorf("the page lacks %q:\n%s", s, a.body)
		}
	}
	return a
}

// lacks fails the test if the body holds any text.
func (a *answer) lacks(t testing.TB, texts ...string) *answer {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(a.body, s) {
			t.Errorf("the page holds %q:\n%s", s, a.body)
		}
	}
	return a
}

// redirects fails the test unless the answer is a 303 to location.
func (a *answer) redirects(t testing.TB, location string) *answer {
	t.Helper()
	if a.status != http.StatusSeeOther || a.header.Get("Location") != location {
		t.Fatalf("status %d to %q, want 303 to %q:\n%s", a.status, a.header.Get("Location"), location, a.body)
	}
	return a
}

// source creates a source of the kind with its configuration.
func (b *bundle) source(t testing.TB, name, kind string, enabled bool, config string) {
	t.Helper()
	if _, err := b.w.CreateSource(b.ctx, lifecycle.Source{Name: name, Kind: kind, Enabled: enabled, Config: json.RawMessage(config)},
		"operator:setup"); err != nil {
		t.Fatal(err)
	}
}

// inboxURL is the database_url of the tests' inbox sources, password and
// all: no page may show the password.
const inboxURL = "postgres://waybill:s3cret-pw@inbox.example:5432/aodb"

// inbox creates an inbox_table source reading inboxURL, and records for it
// what a process polling it would.
func (b *bundle) inbox(t testing.TB, name string) {
	t.Helper()
	b.source(t, name, "inbox_table", true, `{"database_url": "`+inboxURL+`", "table": "cminmsgs", "id_column": "id",
		"payload_column": "body", "from_column": "sender", "to_column": "receiver", "processed_column": "date_processed"}`)
	if _, err := b.db.Exec(b.ctx, `UPDATE source_state SET holder = 'waybill-1', lease_end = $2, watermark = 4711,
		last_poll_at = $3, backlog = 12, last_error = 'inbox database: connection refused', last_error_at = $4 WHERE name = $1`,
		name, b.clock.Now().Add(30*time.Second), b.clock.Now(), b.clock.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
}
