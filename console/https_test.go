package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/waybill/waybill/console"
)

// TestCookiesSecureBehindATrustedProxy: the console's cookies are Secure,
// and its answers carry Strict-Transport-Security, when a trusted proxy
// says the browser came over HTTPS, or when the console is told it is
// reached so only; X-Forwarded-Proto from any other peer is ignored.
func TestCookiesSecureBehindATrustedProxy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		forced  bool
		proto   []string
		secure  bool
	}{
		{"trusted proxy, https", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, false, []string{"https"}, true},
		{"trusted proxy, the nearest says https", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false, []string{"http, HTTPS"}, true},
		{"trusted proxy, the nearest says http", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, false, []string{"https, http"}, false},
		{"trusted proxy, plain http", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, false, nil, false},
		{"untrusted peer, https", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, false, []string{"https"}, false},
		{"no proxy trusted, https", nil, false, []string{"https"}, false},
		{"forced", nil, true, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ui := b.consoleWith(t, func(c *console.Config) { c.TrustedProxies, c.SecureCookies = tc.trusted, tc.forced })
			t.Cleanup(func() { ui.Stop(context.Background()) })
			srv := httptest.NewServer(ui)
			t.Cleanup(srv.Close)
			send := func(method, path string, form url.Values, cookie string) *http.Response {
				req, err := http.NewRequestWithContext(b.ctx, method, srv.URL+path, strings.NewReader(form.Encode()))
				if err != nil {
					t.Fatal(err)
				}
				if form != nil {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if cookie != "" {
					req.Header.Set("Cookie", cookie)
				}
				for _, p := range tc.proto {
					req.Header.Add("X-Forwarded-Proto", p)
				}
				resp, err := http.DefaultTransport.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			check := func(resp *http.Response, name string) *http.Cookie {
				t.Helper()
				for _, c := range resp.Cookies() {
					if c.Name == name {
						if c.Secure != tc.secure {
							t.Errorf("cookie %s: Secure %t, want %t", name, c.Secure, tc.secure)
						}
						if hsts := resp.Header.Get("Strict-Transport-Security"); (hsts == "max-age=31536000") != tc.secure {
							t.Errorf("Strict-Transport-Security %q with Secure %t", hsts, tc.secure)
						}
						return c
					}
				}
				t.Fatalf("no cookie %s: %s", name, resp.Header.Values("Set-Cookie"))
				return nil
			}
			signin := check(send(http.MethodGet, "/ui/signin", nil, ""), "waybill_signin")
			check(send(http.MethodPost, "/ui/signin", url.Values{"token": {b.reader}, "csrf": {signin.Value}},
				"waybill_signin="+signin.Value), "waybill_session")
			// An ended session's cookie is cleared so too.
			check(send(http.MethodGet, "/ui/", nil, "waybill_session=ended"), "waybill_session")
		})
	}
}
