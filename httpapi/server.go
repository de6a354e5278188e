package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// Prefix is the path every route of the API is under.
const Prefix = "/api/v1"

// Authenticator finds who a bearer token belongs to. It returns an error
// wrapping auth.ErrUnauthorized for a token it does not know; any other
// error is its own failure.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (auth.Identity, error)
}

// Config configures a Server.
type Config struct {
	// Writer runs every command; required.
	Writer *commands.Writer
	// DB is what the reads query; required.
	DB *pgxpool.Pool
	// Auth checks the bearer tokens; required.
	Auth Authenticator
	// Tokens, when set, is the store the admins manage tokens in through
	// /tokens; without it those routes answer 404.
	Tokens *auth.Store
	// MaxPayload bounds a request body in bytes; larger ones are refused
	// with 413. Default lifecycle.DefaultMaxPayload (10 MiB).
	MaxPayload int64
	// Registerer takes the HTTP metrics; nil registers none.
	Registerer prometheus.Registerer
	// Base's clock sets the statistics' windows: give the Server the
	// Writer's Base.
	service.Base
	// OnConfigChange, when set, is called after a change of a route, a
	// target or the settings has committed, so the caller can resync its
	// workers and tell other processes. It runs before the answer is sent,
	// on the request's goroutine: it should not block for long.
	OnConfigChange func()
	// OnOperation, when set, is called after a bulk operation was
	// created, so the caller can wake its runner. Like OnConfigChange it
	// runs on the request's goroutine and should not block.
	OnOperation func()
	// Rebuilds runs the online rebuilds POST /rebuilds starts; New makes
	// one when it is nil. Give the console the same.
	Rebuilds *Rebuilds
}

// Server serves the API. It is an http.Handler for paths under Prefix.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
}

// New returns the Server of cfg, with its metrics registered.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Writer == nil {
		errs = append(errs, errors.New("Config.Writer is required"))
	}
	if cfg.DB == nil {
		errs = append(errs, errors.New("Config.DB is required"))
	}
	if cfg.Auth == nil {
		errs = append(errs, errors.New("Config.Auth is required"))
	}
	if cfg.MaxPayload < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxPayload is %d: must not be negative", cfg.MaxPayload))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = lifecycle.DefaultMaxPayload
	}
	cfg.Base = cfg.Base.WithDefaults()
	if cfg.Rebuilds == nil {
		cfg.Rebuilds = NewRebuilds(cfg.Base, cfg.DB)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), metrics: m}
	for _, rt := range routes {
		s.mux.Handle(rt.pattern(), s.adapt(rt))
	}
	return s, nil
}

// ServeHTTP authenticates the request, checks the role of its token against
// the route, serves it and measures it. A webhook (webhookPattern) is
// served with no token: no Authorization, and no cookie, is read for it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	_, pattern := s.mux.Handler(r)
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("http handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
			if rec.status == 0 {
				s.fail(rec, r, fmt.Errorf("panic: %v", v))
			}
		}
		s.metrics.observe(pattern, rec.code(), time.Since(start))
		s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "route", pattern,
			"status", rec.code(), "duration", time.Since(start))
	}()
	if pattern == webhookPattern {
		s.mux.ServeHTTP(rec, r)
		return
	}
	id, err := s.authenticate(r)
	if err != nil {
		s.fail(rec, r, err)
		return
	}
	if pattern == "" {
		s.fail(rec, r, s.unmatched(r))
		return
	}
	need := permission(pattern)
	if !id.Role.Allows(need) {
		s.fail(rec, r, &forbiddenError{role: id.Role, needs: need})
		return
	}
	if id.Scope != nil && !scopedRoutes[pattern] {
		s.fail(rec, r, &forbiddenError{role: id.Role, needs: need,
			reason: scopeOf(id) + ": it reaches messages and their receipts only, not " + pattern})
		return
	}
	s.mux.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
}

// authenticate finds the identity of the request's bearer token.
func (s *Server) authenticate(r *http.Request) (auth.Identity, error) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return auth.Identity{}, fmt.Errorf("%w: send Authorization: Bearer <token>", auth.ErrUnauthorized)
	}
	id, err := s.cfg.Auth.Authenticate(r.Context(), token)
	if err != nil {
		return auth.Identity{}, fmt.Errorf("authenticate: %w", err)
	}
	if id.Name == "" {
		return auth.Identity{}, fmt.Errorf("%w: the token has no name", auth.ErrUnauthorized)
	}
	return id, nil
}

// Authenticated serves h only to a request with an unscoped bearer token
// that may read (auth.Read), answering any other as the API answers it
// (401 with the error envelope, 403 for a token that may not): what is
// served beside the API, such as the metrics, takes the same tokens. The
// metrics name every source and target, so a scoped token, or one that
// may only post messages or receipts, is refused.
func (s *Server) Authenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.authenticate(r)
		switch {
		case err != nil:
		case !id.Role.Allows(auth.Read):
			err = &forbiddenError{role: id.Role, needs: auth.Read}
		case id.Scope != nil:
			err = &forbiddenError{role: id.Role, needs: auth.Read,
				reason: "a scoped token reads only its own messages; the metrics name every source and target"}
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// unmatched says why no route serves r: another method would be served at
// its path (405), or nothing is (404).
func (s *Server) unmatched(r *http.Request) error {
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, p := s.mux.Handler(probe); p != "" {
			allow = append(allow, method)
		}
	}
	if len(allow) > 0 {
		return &methodError{allow: allow}
	}
	return fmt.Errorf("%w: nothing is served at %s %s", commands.ErrNotFound, r.Method, r.URL.Path)
}

// permission is what a request on the route of pattern needs:
// administering for the tokens, which a reader may not even list, and for
// the signing keys (a target's, the callbacks', the alert webhook's),
// which a reader may not see, reading for any other GET, ingesting to post
// a message, confirming to post a receipt (by delivery or by receiver's
// id), administering for everything else. The method is the pattern's,
// not the request's: a HEAD is served by its GET route and needs what the
// GET needs.
func permission(pattern string) auth.Permission {
	method, path, _ := strings.Cut(pattern, " ")
	switch {
	case strings.HasPrefix(path, Prefix+"/tokens"), strings.HasSuffix(path, "/secret"):
		return auth.Administer
	case method == http.MethodGet:
		return auth.Read
	case pattern == "POST "+Prefix+"/routes/try":
		// It writes nothing: a read.
		return auth.Read
	case pattern == "POST "+Prefix+"/messages":
		return auth.Ingest
	case pattern == "POST "+Prefix+"/deliveries/{id}/receipt", pattern == "POST "+Prefix+"/receipts":
		return auth.Confirm
	}
	return auth.Administer
}

// scopedRoutes are the routes a scoped token may take, within its scope,
// which their handlers check: its sources' messages and the routes'
// trial of them, its targets' receipts, and the API's description.
var scopedRoutes = map[string]bool{
	"POST " + Prefix + "/messages":                true,
	"GET " + Prefix + "/messages":                 true,
	"GET " + Prefix + "/messages/{id}":            true,
	"GET " + Prefix + "/messages/{id}/payload":    true,
	"GET " + Prefix + "/messages/{id}/history":    true,
	"POST " + Prefix + "/deliveries/{id}/receipt": true,
	"POST " + Prefix + "/receipts":                true,
	"GET " + Prefix + "/openapi.json":             true,
	"POST " + Prefix + "/routes/try":              true,
}

// scopeOf says what a scoped identity is bound to, for the reasons of its
// refusals.
func scopeOf(id auth.Identity) string {
	if id.Scope.Targets != nil {
		return "the token is scoped to the targets " + strings.Join(id.Scope.Targets, ", ")
	}
	return "the token is scoped to the sources " + strings.Join(id.Scope.Sources, ", ")
}

type identityKey struct{}

// identity is who the request acts as; ServeHTTP put it in the context.
func identity(r *http.Request) auth.Identity {
	id, _ := r.Context().Value(identityKey{}).(auth.Identity)
	return id
}

// actor is the journal's actor for the request's token: operator:<name>.
func actor(r *http.Request) string { return journal.OperatorActor(identity(r).Name) }

// adapt turns the route's handler, which returns its error, into an
// http.Handler that refuses a query the route does not take, so a handler
// reads its parameters from r.URL.Query(), and answers an error with the
// envelope. A webhook's query is left alone: a provider posts to the URL
// an operator gave it, which may carry a query of the operator's own, and
// a refusal there would lose its events.
func (s *Server) adapt(rt route) http.Handler {
	webhook := rt.pattern() == webhookPattern
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		if !webhook {
			err = query(r, rt.params)
		}
		if err == nil {
			err = rt.handle(s, w, r)
		}
		if err != nil {
			s.fail(w, r, err)
		}
	})
}

// query refuses a query that does not parse, and any parameter not named
// in allowed or given twice, every one at once.
func query(r *http.Request, allowed []string) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return fieldError("query", "is not a valid query string: "+err.Error())
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(allowed, name):
			errs = append(errs, &lifecycle.FieldError{Field: keyName(name), Problem: "is not a parameter here: " + allowedAre(allowed)})
		case len(q[name]) > 1:
			errs = append(errs, &lifecycle.FieldError{Field: keyName(name), Problem: "is given more than once"})
		}
	}
	return invalid(errs...)
}

// configChanged tells the caller that a configuration change committed.
func (s *Server) configChanged() {
	if s.cfg.OnConfigChange != nil {
		s.cfg.OnConfigChange()
	}
}

// recorder keeps the status a handler wrote, for the metrics and the log.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
