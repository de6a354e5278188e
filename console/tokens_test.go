package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/waybill/waybill/auth"
)

var secretShown = regexp.MustCompile(`<code id="secret">(wb_[0-9a-f]{16}_[0-9a-f]{64})</code>`)

// TestTokensPage: only an admin sees the Tokens page and its link; a token
// made there is shown once, with its scope, and works; a scoped token
// cannot sign in.
func TestTokensPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reader := b.signedIn(t, b.reader)
	reader.get(t, "/ui/").want(t, http.StatusOK).lacks(t, `href="/ui/tokens"`)
	reader.get(t, "/ui/tokens").want(t, http.StatusForbidden)

	admin := b.signedIn(t, b.admin)
	admin.get(t, "/ui/").want(t, http.StatusOK).has(t, `href="/ui/tokens"`)
	admin.get(t, "/ui/tokens").want(t, http.StatusOK).has(t, "alice", "rita", "erp-feed", "Make a token").lacks(t, `id="secret"`)

	// A scope the role does not take is refused beside its field.
	admin.post(t, "/ui/tokens", url.Values{"name": {"root"}, "role": {"admin"}, "sources": {"erp"}}).
		want(t, http.StatusBadRequest).has(t, "takes no sources")
	a := admin.post(t, "/ui/tokens", url.Values{"name": {"erp-desk"}, "role": {"reader"}, "sources": {"erp, crm"}, "expires": {"90d"}}).
		want(t, http.StatusCreated).has(t, "sources erp, crm", start.Add(90*24*time.Hour).Format(time.RFC3339))
	m := secretShown.FindStringSubmatch(a.body)
	if m == nil {
		t.Fatalf("the secret is not shown:\n%s", a.body)
	}
	id, err := b.tokens.Authenticate(b.ctx, m[1])
	if err != nil || id.Name != "erp-desk" || id.Role != auth.RoleReader || id.Scope == nil || strings.Join(id.Scope.Sources, ",") != "erp,crm" {
		t.Fatalf("the token shown: %+v, %v", id, err)
	}
	admin.get(t, "/ui/tokens").want(t, http.StatusOK).has(t, "erp-desk").lacks(t, m[1])

	// The console shows every source: a scoped token works with the API only.
	b.client(t).signIn(t, m[1]).want(t, http.StatusForbidden).has(t, "scoped")

	admin.get(t, "/ui/tokens/erp-desk/revoke").want(t, http.StatusOK).has(t, "Revoke every token named erp-desk?")
	admin.post(t, "/ui/tokens/erp-desk/revoke", nil).redirects(t, "/ui/tokens")
	if _, err := b.tokens.Authenticate(b.ctx, m[1]); err == nil {
		t.Fatal("a revoked token authenticates")
	}
	admin.post(t, "/ui/tokens/alice/revoke", nil).want(t, http.StatusConflict).has(t, "last admin token")
}

// TestTokensInTheBrowser: an admin makes a scoped token on the Tokens
// page, reads its secret once, and revokes it, in headless Chromium.
func TestTokensInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBrowser(t, b.srv.URL)
	br.open(t, "/ui/signin")
	br.do(t, chromedp.SendKeys(chromedp.CSS("#token"), b.admin))
	br.load(t, chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter))
	br.load(t, chromedp.Click(chromedp.CSS(`nav a[href="/ui/tokens"]`)))
	if got := br.text(t, "h1"); got != "Tokens" {
		t.Fatalf("the nav's Tokens leads to %q", got)
	}
	// A wrong pairing: refused, the problem under its field.
	br.do(t, chromedp.SendKeys(chromedp.CSS("#name"), "partner"), chromedp.SetValue(chromedp.CSS("#role"), "ingest"),
		chromedp.SendKeys(chromedp.CSS("#targets"), "billing"))
	br.loadStatus(t, 400, chromedp.Click(chromedp.CSS(`form[action="/ui/tokens"] button[type=submit]`)))
	if got := br.text(t, "#targets-hint strong"); !strings.Contains(got, "a token of role ingest takes no targets") {
		t.Errorf("the targets' problem reads %q", got)
	}
	br.do(t, chromedp.SetValue(chromedp.CSS("#role"), "receipt"), chromedp.SendKeys(chromedp.CSS("#expires"), "12h"))
	br.loadStatus(t, 201, chromedp.Click(chromedp.CSS(`form[action="/ui/tokens"] button[type=submit]`)))
	secret := br.text(t, "#secret")
	if id, err := b.tokens.Authenticate(b.ctx, secret); err != nil || id.Scope == nil || strings.Join(id.Scope.Targets, ",") != "billing" {
		t.Fatalf("the secret shown %q: %+v, %v", secret, id, err)
	}
	row := eval[string](t, br, `[...document.querySelectorAll("tbody tr")].map(r => r.innerText).find(r => r.startsWith("partner")) ?? ""`)
	for _, want := range []string{"partner", "receipt", "targets billing", start.Add(12 * time.Hour).Format(time.RFC3339)} {
		if !strings.Contains(row, want) {
			t.Errorf("the new token's row %q lacks %q", row, want)
		}
	}
	br.shot(t, "tokens")
	br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/tokens/partner/revoke"]`)))
	if got := br.text(t, "h1"); got != "Revoke every token named partner?" {
		t.Errorf("the confirmation asks %q", got)
	}
	br.focus(t, "Revoke")
	br.load(t, chromedp.KeyEvent(kb.Enter))
	if got := br.text(t, ".notice"); got != "Revoked the tokens named partner." {
		t.Errorf("the notice reads %q", got)
	}
	if n := eval[int](t, br, `document.querySelectorAll('a[href="/ui/tokens/partner/revoke"]').length`); n != 0 {
		t.Errorf("partner is still listed")
	}
}
