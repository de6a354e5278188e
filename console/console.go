package console

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/feed"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/service"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// The defaults of Config.
const (
	DefaultSessionTTL       = 12 * time.Hour
	DefaultLivePoll         = time.Second
	DefaultLiveWriteTimeout = 10 * time.Second
)

// Config configures a Console.
type Config struct {
	// Writer runs every action; required.
	Writer *commands.Writer
	// DB is what the pages read; required.
	DB *pgxpool.Pool
	// Tokens signs browsers in and keeps their sessions; required.
	Tokens *auth.Store
	// Base's clock sets the figures' windows and the sessions: give the
	// Console the Writer's Base.
	service.Base
	// SessionTTL is how long a sign-in lasts. Default 12 h; from 1 min to
	// 30 days.
	SessionTTL time.Duration
	// LivePoll is how often the process's tail reads the journal's new
	// events, while a message page follows its history. Default 1 s; from
	// 10 ms to 1 min.
	LivePoll time.Duration
	// LiveWriteTimeout bounds each write to a live history's stream: a
	// browser that does not take it in time loses its stream. Default
	// 10 s; from 10 ms to 1 min.
	LiveWriteTimeout time.Duration
	// OnConfigChange, as the API's: called after a change of a route, a
	// target or the settings has committed.
	OnConfigChange func()
	// OnOperation, as the API's: called after a bulk operation was
	// created, to wake the runner.
	OnOperation func()
	// TrustedProxies are the peers (a TLS proxy in front of the console)
	// whose X-Forwarded-Proto is believed: from one of them, "https"
	// makes the cookies Secure and adds Strict-Transport-Security. From
	// any other peer the header is ignored, since anyone can send it.
	TrustedProxies []netip.Prefix
	// Rebuilds runs the online rebuilds the console starts: the API's
	// (httpapi.Config.Rebuilds), so each sees the other's. New makes one
	// when it is nil.
	Rebuilds *httpapi.Rebuilds
	// SecureCookies says the console is reached over HTTPS only, however
	// the request arrives: every cookie is Secure and every answer has
	// Strict-Transport-Security.
	SecureCookies bool
}

// Console serves the web console. It is an http.Handler for paths under
// Prefix, and a service.Service whose Stop ends the live histories.
type Console struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes map[string]route
	views  *views
	// closed ends the live histories when the server shuts down: a
	// stream never goes idle on its own.
	closed context.Context
	close  context.CancelFunc
	// tail tells the live histories when their messages move; streams
	// counts them against the settings' caps.
	tail    *feed.Tail
	streams streams
}

// New returns the Console of cfg.
func New(cfg Config) (*Console, error) {
	var errs []error
	if cfg.Writer == nil {
		errs = append(errs, errors.New("Config.Writer is required"))
	}
	if cfg.DB == nil {
		errs = append(errs, errors.New("Config.DB is required"))
	}
	if cfg.Tokens == nil {
		errs = append(errs, errors.New("Config.Tokens is required"))
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL < time.Minute || cfg.SessionTTL > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("Config.SessionTTL is %s: must be from 1m to 720h", cfg.SessionTTL))
	}
	if cfg.LivePoll == 0 {
		cfg.LivePoll = DefaultLivePoll
	}
	if cfg.LivePoll < 10*time.Millisecond || cfg.LivePoll > time.Minute {
		errs = append(errs, fmt.Errorf("Config.LivePoll is %s: must be from 10ms to 1m", cfg.LivePoll))
	}
	if cfg.LiveWriteTimeout == 0 {
		cfg.LiveWriteTimeout = DefaultLiveWriteTimeout
	}
	if cfg.LiveWriteTimeout < 10*time.Millisecond || cfg.LiveWriteTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("Config.LiveWriteTimeout is %s: must be from 10ms to 1m", cfg.LiveWriteTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Rebuilds == nil {
		cfg.Rebuilds = httpapi.NewRebuilds(cfg.Base, cfg.DB)
	}
	v, err := parseViews()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), routes: map[string]route{}, views: v,
		tail: feed.NewTail(cfg.DB, cfg.LivePoll, cfg.Logger), streams: streams{bySession: map[string]int{}}}
	c.closed, c.close = context.WithCancel(context.Background())
	for _, rt := range routeTable {
		c.routes[rt.pattern] = rt
		c.mux.Handle(rt.pattern, c.adapt(rt.handle))
	}
	return c, nil
}

// Start does nothing: the console serves through the HTTP server that
// holds it.
func (c *Console) Start(context.Context) error { return nil }

// Stop ends the live histories being followed, which never end on their
// own, so that the HTTP server can shut down: stop the console before it.
// The browsers reconnect to another process, or to this one's successor.
// The streams end at once; the HTTP server's stop waits for them. Then the
// tail that told them of new events stops. Stop is safe to call twice, and
// without Start.
func (c *Console) Stop(context.Context) {
	c.close()
	c.tail.Stop()
}

// access is what a route needs of the request.
type access int

const (
	// public: nothing; the sign-in page and the static files.
	public access = iota
	// signedIn: a session of any role.
	signedIn
	// reading: a session whose role may read, as the API's GETs.
	reading
	// administering: a session whose role may administer, as the API's
	// operator actions and configuration changes.
	administering
)

// permission is the auth.Permission of a, for the two that have one.
func (a access) permission() (auth.Permission, bool) {
	switch a {
	case reading:
		return auth.Read, true
	case administering:
		return auth.Administer, true
	}
	return 0, false
}

// route is one page or action of the console.
type route struct {
	pattern string
	needs   access
	handle  handler
}

// handler serves a request of session s (nil on a public route) and
// returns what went wrong, for the one place that answers errors.
type handler func(c *Console, w http.ResponseWriter, r *http.Request, s *auth.Session) error

// routeTable is everything the console serves. An action is a GET of its
// confirmation page and a POST of the same path, which does it; a HEAD
// is served as its GET, so a handler does anything only on a POST.
var routeTable = []route{
	{"GET /ui/static/", public, (*Console).static},
	{"GET /ui/signin", public, (*Console).signinPage},
	{"POST /ui/signin", public, (*Console).signin},
	{"POST /ui/signout", signedIn, (*Console).signout},

	{"GET /ui/{$}", reading, (*Console).dashboard},
	{"GET /ui/messages", reading, (*Console).messages},
	{"GET /ui/messages/{id}", reading, (*Console).message},
	{"GET /ui/messages/{id}/payload", reading, (*Console).payload},
	{"GET /ui/messages/{id}/live", reading, (*Console).live},
	{"GET /ui/messages/{id}/live/status", reading, (*Console).liveState},
	{"GET /ui/messages/{id}/deliver-now", administering, (*Console).deliverNow},
	{"POST /ui/messages/{id}/deliver-now", administering, (*Console).deliverNow},
	{"GET /ui/messages/{id}/redispatch", administering, (*Console).redispatch},
	{"POST /ui/messages/{id}/redispatch", administering, (*Console).redispatch},
	{"GET /ui/messages/{id}/resend", administering, (*Console).resend},
	{"POST /ui/messages/{id}/resend", administering, (*Console).resend},
	{"GET /ui/messages/{id}/replay", administering, (*Console).replay},
	{"POST /ui/messages/{id}/replay", administering, (*Console).replay},
	{"GET /ui/messages/{id}/deliveries/{delivery_id}/redeliver", administering, (*Console).redeliver},
	{"POST /ui/messages/{id}/deliveries/{delivery_id}/redeliver", administering, (*Console).redeliver},
	{"GET /ui/messages/{id}/deliveries/{delivery_id}/skip", administering, (*Console).skip},
	{"POST /ui/messages/{id}/deliveries/{delivery_id}/skip", administering, (*Console).skip},

	{"GET /ui/targets", reading, (*Console).targets},
	{"POST /ui/targets", administering, (*Console).createTarget},
	{"GET /ui/targets/{name}", reading, (*Console).target},
	{"GET /ui/targets/{name}/lanes", reading, (*Console).lanes},
	{"GET /ui/targets/{name}/edit", administering, (*Console).editTarget},
	{"POST /ui/targets/{name}/edit", administering, (*Console).editTarget},
	{"GET /ui/targets/{name}/enable", administering, (*Console).enableTarget},
	{"POST /ui/targets/{name}/enable", administering, (*Console).enableTarget},
	{"GET /ui/targets/{name}/disable", administering, (*Console).enableTarget},
	{"POST /ui/targets/{name}/disable", administering, (*Console).enableTarget},
	{"GET /ui/targets/{name}/health/close", administering, (*Console).closeBreaker},
	{"POST /ui/targets/{name}/health/close", administering, (*Console).closeBreaker},
	{"GET /ui/targets/{name}/secret", administering, (*Console).revealKeys},
	{"POST /ui/targets/{name}/secret", administering, (*Console).revealKeys},
	{"GET /ui/targets/{name}/secret/rotate", administering, (*Console).rotateKey},
	{"POST /ui/targets/{name}/secret/rotate", administering, (*Console).rotateKey},
	{"GET /ui/targets/{name}/delete", administering, (*Console).deleteTarget},
	{"POST /ui/targets/{name}/delete", administering, (*Console).deleteTarget},

	{"GET /ui/sources", reading, (*Console).sourcesPage},
	{"POST /ui/sources", administering, (*Console).createSource},
	{"GET /ui/sources/{name}", reading, (*Console).source},
	{"GET /ui/sources/{name}/edit", administering, (*Console).editSource},
	{"POST /ui/sources/{name}/edit", administering, (*Console).editSource},
	{"GET /ui/sources/{name}/enable", administering, (*Console).enableSource},
	{"POST /ui/sources/{name}/enable", administering, (*Console).enableSource},
	{"GET /ui/sources/{name}/disable", administering, (*Console).enableSource},
	{"POST /ui/sources/{name}/disable", administering, (*Console).enableSource},
	{"GET /ui/sources/{name}/delete", administering, (*Console).deleteSource},
	{"POST /ui/sources/{name}/delete", administering, (*Console).deleteSource},

	{"GET /ui/routes", reading, (*Console).routesPage},
	{"GET /ui/try", reading, (*Console).tryRoutes},
	{"POST /ui/try", reading, (*Console).tryRoutes},
	{"POST /ui/routes", administering, (*Console).createRoute},
	{"GET /ui/routes/{id}/delete", administering, (*Console).deleteRoute},
	{"POST /ui/routes/{id}/delete", administering, (*Console).deleteRoute},

	{"GET /ui/operations", reading, (*Console).operations},
	{"GET /ui/operations/new", administering, (*Console).newOperation},
	{"POST /ui/operations/new", administering, (*Console).newOperation},
	{"GET /ui/operations/{id}", reading, (*Console).operation},
	{"GET /ui/operations/{id}/cancel", administering, (*Console).cancelOperation},
	{"POST /ui/operations/{id}/cancel", administering, (*Console).cancelOperation},

	{"GET /ui/settings", reading, (*Console).settings},
	{"POST /ui/settings", administering, (*Console).settings},
	{"GET /ui/rebuild", reading, (*Console).rebuildPage},
	{"GET /ui/rebuild/start", administering, (*Console).startRebuild},
	{"POST /ui/rebuild/start", administering, (*Console).startRebuild},

	{"GET /ui/tokens", administering, (*Console).tokensPage},
	{"POST /ui/tokens", administering, (*Console).createToken},
	{"GET /ui/tokens/{name}/revoke", administering, (*Console).revokeTokens},
	{"POST /ui/tokens/{name}/revoke", administering, (*Console).revokeTokens},
}

// The cookies of the console. Each is HttpOnly and SameSite=Strict, so no
// script reads it and no other site's page sends it.
const (
	sessionCookie = "waybill_session"
	// signinCookie holds the sign-in form's CSRF value before there is
	// a session.
	signinCookie = "waybill_signin"
	// noticeCookie carries what an action did to the page it leads to.
	noticeCookie = "waybill_notice"
)

// maxForm bounds a form's body.
const maxForm = 1 << 20

type sessionKey struct{}

// ServeHTTP checks the session, its role against the route and the CSRF
// token of a form, then serves the request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	if c.overHTTPS(r) {
		w.Header().Set("Strict-Transport-Security", hsts)
	}
	_, pattern := c.mux.Handler(r)
	rt, found := c.routes[pattern]
	var s *auth.Session
	if rt.needs != public || !found {
		var err error
		if s, err = c.session(w, r); err != nil {
			c.fail(w, r, nil, err)
			return
		}
	}
	switch {
	case !found && s == nil:
		c.signInFirst(w, r)
		return
	case !found:
		c.fail(w, r, s, fmt.Errorf("%w: nothing is served at %s", commands.ErrNotFound, r.URL.Path))
		return
	case rt.needs == public:
	case s == nil:
		c.signInFirst(w, r)
		return
	}
	if need, ok := rt.needs.permission(); ok && !s.Role.Allows(need) {
		c.fail(w, r, s, httpapi.Forbidden(s.Role, need))
		return
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, s, invalidField("form", "could not be read: "+err.Error()))
			return
		}
		if s != nil && !sameSecret(r.PostForm.Get("csrf"), s.CSRF) {
			c.fail(w, r, s, errStaleForm)
			return
		}
	}
	c.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
}

// adapt turns a handler into an http.Handler that answers its error, and
// a panic as an internal error: the request alone fails, with a page that
// says so, and the console serves on.
func (c *Console) adapt(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := r.Context().Value(sessionKey{}).(*auth.Session)
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				c.fail(w, r, s, fmt.Errorf("panic: %v", v))
			}
		}()
		if err := h(c, w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	})
}

// session is the request's session, nil when it has none or the one it
// names has ended; the cookie of an ended one is cleared.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (*auth.Session, error) {
	cookie, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, nil
	}
	s, err := c.cfg.Tokens.Session(r.Context(), cookie.Value, c.cfg.Now())
	if errors.Is(err, auth.ErrUnauthorized) {
		c.clearCookie(w, r, sessionCookie, Prefix)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// signInFirst sends a request without a session to the sign-in page: a
// page through a redirect that comes back to it, a request of htmx through
// its HX-Redirect header, anything else with 401.
func (c *Console) signInFirst(w http.ResponseWriter, r *http.Request) {
	to := "/ui/signin"
	if r.Method == http.MethodGet && r.URL.Path != Prefix {
		to += "?" + url.Values{"next": {r.URL.RequestURI()}}.Encode()
	}
	switch {
	case r.Header.Get("HX-Request") == "true":
		w.Header().Set("HX-Redirect", to)
		w.WriteHeader(http.StatusUnauthorized)
	case r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/live"):
		http.Redirect(w, r, to, http.StatusSeeOther)
	default:
		c.render(w, r, http.StatusUnauthorized, "error", page{Title: "Signed out", View: errorView{
			Status: http.StatusUnauthorized, Message: "Your session has ended. Sign in again, then repeat what you were doing.",
		}})
	}
}

// errStaleForm is a form without the session's CSRF token: from another
// site, or from a page of a session that has ended.
var errStaleForm = errors.New("the form is not from this session of the console: reload the page and try again")

// sameSecret compares two secrets in constant time; an empty one never
// matches.
func sameSecret(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// contentSecurityPolicy lets a page load only the console's own scripts,
// styles and images, connect only to its own origin, and be framed by
// nothing. No inline script or style runs.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every answer of the console carries.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
}

// hsts is the Strict-Transport-Security of an answer over HTTPS: a year,
// for the console's host alone (other services may share the domain).
const hsts = "max-age=31536000"

// overHTTPS reports whether the browser reached the console over HTTPS:
// the request came over TLS, or from a trusted proxy that says so in
// X-Forwarded-Proto (the last value, the one the nearest proxy set), or
// the console is configured to be reached so only.
func (c *Console) overHTTPS(r *http.Request) bool {
	if r.TLS != nil || c.cfg.SecureCookies {
		return true
	}
	proto := r.Header.Values("X-Forwarded-Proto")
	if len(proto) == 0 {
		return false
	}
	last := proto[len(proto)-1]
	last = strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:])
	if !strings.EqualFold(last, "https") {
		return false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(c.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(peer.Addr().Unmap()) })
}

// setCookie sets a cookie of the console for maxAge: HttpOnly,
// SameSite=Strict, and Secure when the browser reached the console over
// HTTPS (overHTTPS). The age is relative, so the browser's clock and the
// server's need not agree.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value, path string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, MaxAge: int(maxAge.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.overHTTPS(r)})
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request, name, path string) {
	http.SetCookie(w, &http.Cookie{Name: name, Path: path, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: c.overHTTPS(r)})
}

// done answers an action that succeeded: the page it leads to shows the
// notice once.
func (c *Console) done(w http.ResponseWriter, r *http.Request, to, notice string) {
	c.setCookie(w, r, noticeCookie, url.QueryEscape(notice), Prefix, time.Minute)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// configChanged tells the caller that a configuration change committed.
func (c *Console) configChanged() {
	if c.cfg.OnConfigChange != nil {
		c.cfg.OnConfigChange()
	}
}
