package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/console"
)

func TestSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// Without a session, a page leads to the sign-in, which leads back.
	c := b.client(t)
	c.get(t, "/ui/messages?status=error").redirects(t, "/ui/signin?next=%2Fui%2Fmessages%3Fstatus%3Derror")
	c.get(t, "/ui/signin?next=%2Fui%2Fmessages%3Fstatus%3Derror").want(t, http.StatusOK).
		has(t, `name="next" value="/ui/messages?status=error"`)
	c.post(t, "/ui/signin", url.Values{"token": {"wb_nonsense"}, "next": {"/ui/messages?status=error"}}).
		want(t, http.StatusUnauthorized).has(t, "This token is not known")
	a := c.post(t, "/ui/signin", url.Values{"token": {b.admin}, "next": {"/ui/messages?status=error"}}).
		redirects(t, "/ui/messages?status=error")
	cookie := a.header.Values("Set-Cookie")
	var session string
	for _, v := range cookie {
		if strings.HasPrefix(v, "waybill_session=") {
			session = v
		}
	}
	for _, attr := range []string{"Path=/ui/", "HttpOnly", "SameSite=Strict", "Max-Age=43200"} {
		if !strings.Contains(session, attr) {
			t.Errorf("session cookie %q lacks %s", session, attr)
		}
	}
	if strings.Contains(session, "Secure") {
		t.Errorf("session cookie %q is Secure over plain HTTP", session)
	}
	c.get(t, "/ui/").want(t, http.StatusOK).has(t, "alice", "(admin)", "Sign out")
	// Signed in, the sign-in page leads on.
	c.get(t, "/ui/signin").redirects(t, "/ui/")

	// A sign-in never leads to another site.
	for _, next := range []string{"https://evil.example/", "//evil.example/ui/", `/\evil.example`, "/api/v1/stats", "ui/"} {
		other := b.client(t)
		other.get(t, "/ui/signin").want(t, http.StatusOK)
		other.post(t, "/ui/signin", url.Values{"token": {b.reader}, "next": {next}}).redirects(t, "/ui/")
	}

	// The sign-in form's token must be the one its cookie holds.
	stranger := b.client(t)
	stranger.post(t, "/ui/signin", url.Values{"token": {b.admin}, "csrf": {"guessed"}}).
		want(t, http.StatusForbidden).has(t, "had expired or was not this console")

	// htmx is told where to go rather than given the sign-in page.
	req, _ := http.NewRequestWithContext(b.ctx, http.MethodGet, b.srv.URL+"/ui/", nil)
	req.Header.Set("HX-Request", "true")
	hx := b.client(t).do(t, req).want(t, http.StatusUnauthorized)
	if got := hx.header.Get("HX-Redirect"); got != "/ui/signin" {
		t.Errorf("HX-Redirect %q", got)
	}
}

func TestSessionCookieIsSecureOverTLS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewTLSServer(b.console)
	t.Cleanup(srv.Close)
	c := b.clientOf(t, srv)
	a := c.signIn(t, b.reader).want(t, http.StatusSeeOther)
	if got := strings.Join(a.header.Values("Set-Cookie"), "\n"); !strings.Contains(got, "waybill_session=") ||
		!strings.Contains(got[strings.Index(got, "waybill_session="):], "Secure") {
		t.Errorf("cookies over TLS: %s", got)
	}
}

func TestSessionEndsAndSignOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.reader)
	c.get(t, "/ui/messages").want(t, http.StatusOK)

	// Sign-out needs the form's token, then ends the session.
	c.post(t, "/ui/signout", url.Values{"csrf": {"stale"}}).want(t, http.StatusForbidden)
	c.get(t, "/ui/messages").want(t, http.StatusOK)
	c.post(t, "/ui/signout", nil).redirects(t, "/ui/signin")
	c.get(t, "/ui/messages").redirects(t, "/ui/signin?next=%2Fui%2Fmessages")

	// A session lasts its time, no more.
	d := b.signedIn(t, b.reader)
	b.clock.Advance(console.DefaultSessionTTL - time.Second)
	d.get(t, "/ui/messages").want(t, http.StatusOK)
	b.clock.Advance(time.Second)
	d.get(t, "/ui/messages").redirects(t, "/ui/signin?next=%2Fui%2Fmessages")
	d.post(t, "/ui/settings", url.Values{"delivery.max_dispatches": {"3"}}).
		want(t, http.StatusUnauthorized).has(t, "Your session has ended")
}

func TestSessionsAreSharedByServerProcesses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.admin)
	// The same cookies, sent to another process on the same database.
	other := httptest.NewServer(b.newConsole(t))
	t.Cleanup(other.Close)
	elsewhere := &client{b: b, base: other.URL, http: c.http, csrf: c.csrf}
	elsewhere.get(t, "/ui/settings").want(t, http.StatusOK).has(t, "alice")
	elsewhere.post(t, "/ui/settings", url.Values{"delivery.max_dispatches": {"7"}}).redirects(t, "/ui/settings")
	c.get(t, "/ui/settings").want(t, http.StatusOK).has(t, `value="7"`, "Settings saved.")
}

func TestRevokedTokenEndsItsSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.reader)
	c.get(t, "/ui/").want(t, http.StatusOK)
	if _, err := b.tokens.Revoke(b.ctx, b.reader); err != nil {
		t.Fatal(err)
	}
	c.get(t, "/ui/").redirects(t, "/ui/signin")
}
