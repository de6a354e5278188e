package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// The tokens of the tests, one per role.
const (
	adminToken   = "admin-secret"
	ingestToken  = "ingest-secret"
	readerToken  = "reader-secret"
	receiptToken = "receipt-secret"
	// The scoped tokens: ingest to erp and crm, reading erp, settling
	// billing's deliveries.
	scopedIngestToken  = "scoped-ingest-secret"
	scopedReaderToken  = "scoped-reader-secret"
	scopedReceiptToken = "scoped-receipt-secret"
)

// tokens is a tiny Authenticator over a map.
type tokens map[string]auth.Identity

func (m tokens) Authenticate(_ context.Context, token string) (auth.Identity, error) {
	id, ok := m[token]
	if !ok {
		return auth.Identity{}, auth.ErrUnauthorized
	}
	return id, nil
}

var testTokens = tokens{
	adminToken:   {Name: "alice", Role: auth.RoleAdmin},
	ingestToken:  {Name: "erp-feed", Role: auth.RoleIngest},
	readerToken:  {Name: "rita", Role: auth.RoleReader},
	receiptToken: {Name: "partner", Role: auth.RoleReceipt},
	scopedIngestToken: {Name: "erp-crm-feed", Role: auth.RoleIngest,
		Scope: &auth.Scope{Sources: []string{"erp", "crm"}}},
	scopedReaderToken:  {Name: "erp-desk", Role: auth.RoleReader, Scope: &auth.Scope{Sources: []string{"erp"}}},
	scopedReceiptToken: {Name: "billing-partner", Role: auth.RoleReceipt, Scope: &auth.Scope{Targets: []string{"billing"}}},
}

// quiet keeps the logs to warnings and errors.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// bundle is what a test of the API works with: a fresh database, a Writer on
// a clock that moves only when the test says, and the API served over HTTP.
type bundle struct {
	ctx     context.Context
	db      *pgxpool.Pool
	clock   *testclock.Clock
	w       *commands.Writer
	tokens  *auth.Store
	api     *httpapi.Server
	srv     *httptest.Server
	reg     *prometheus.Registry
	changes atomic.Int32
}

// start is the test clock's first time.
var start = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, httpapi.Config{})
}

// setupWith fills cfg's Writer, DB, Auth (the tests' map), Tokens (a store
// on the test's database), Registerer, Logger, Now and OnConfigChange and
// serves it.
func setupWith(t *testing.T, cfg httpapi.Config) *bundle {
	t.Helper()
	b := &bundle{ctx: t.Context(), clock: testclock.New(start), reg: prometheus.NewRegistry()}
	b.db = dbtest.Pool(t)
	var err error
	if b.w, err = commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now, Logger: quiet}, DB: b.db}); err != nil {
		t.Fatal(err)
	}
	b.tokens = auth.NewStore(b.db, b.clock.Now)
	cfg.Writer, cfg.DB, cfg.Auth, cfg.Tokens, cfg.Registerer, cfg.Logger, cfg.Now = b.w, b.db, testTokens, b.tokens, b.reg, quiet, b.clock.Now
	cfg.OnConfigChange = func() { b.changes.Add(1) }
	if b.api, err = httpapi.New(cfg); err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewServer(b.api)
	t.Cleanup(b.srv.Close)
	return b
}

// reply is an answer of the API.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// send makes a request with a raw body and checks the answer against the
// OpenAPI document: its status must be documented for the operation and
// its body must match the documented schema.
func (b *bundle) send(t *testing.T, token, method, path, contentType string, body []byte) *reply {
	t.Helper()
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return b.sendHeader(t, token, method, path, h, body)
}

// sendHeader is send with the request's headers besides Authorization.
func (b *bundle) sendHeader(t *testing.T, token, method, path string, h http.Header, body []byte) *reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(b.ctx, method, b.srv.URL+httpapi.Prefix+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := &reply{status: resp.StatusCode, header: resp.Header}
	if r.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	for _, problem := range apiSpec(t).checkReply(method, path, r) {
		t.Errorf("%s %s answered %d: %s\n%s", method, path, r.status, problem, r.body)
	}
	return r
}

// as sends v as JSON (nil sends no body) with Content-Type
// application/json, as the holder of token.
func (b *bundle) as(t *testing.T, token, method, path string, v any) *reply {
	t.Helper()
	var body []byte
	switch v := v.(type) {
	case nil:
	case string:
		body = []byte(v)
	default:
		var err error
		if body, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	ct := ""
	if method == http.MethodPost || method == http.MethodPut {
		ct = "application/json"
	}
	return b.send(t, token, method, path, ct, body)
}

// admin sends as the admin.
func (b *bundle) admin(t *testing.T, method, path string, v any) *reply {
	t.Helper()
	return b.as(t, adminToken, method, path, v)
}

// want fails the test unless the status is want, and decodes the body into
// v when v is not nil.
func (r *reply) want(t *testing.T, want int, v any) *reply {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
	}
	return r
}

// fails checks an error answer's status and code and returns its body.
func (r *reply) fails(t *testing.T, status int, code string) httpapi.ErrorBody {
	t.Helper()
	var e httpapi.ErrorResponse
	r.want(t, status, &e)
	if e.Error.Code != code {
		t.Fatalf("code %s, want %s: %s", e.Error.Code, code, r.body)
	}
	return e.Error
}

// invalidField checks a 400 INVALID_FIELD that names field.
func (r *reply) invalidField(t *testing.T, field string) httpapi.ErrorBody {
	t.Helper()
	e := r.fails(t, http.StatusBadRequest, httpapi.CodeInvalidField)
	if e.Details.Field != field || e.Details.Problem == "" {
		t.Fatalf("details name field %q (%q), want %q: %s", e.Details.Field, e.Details.Problem, field, r.body)
	}
	return e
}

// counts are the rows of the tables a write would add to.
type counts struct{ messages, deliveries, journal, payloads, routes, targets int }

func (b *bundle) counts(t *testing.T) counts {
	t.Helper()
	var c counts
	err := b.db.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM deliveries),
		(SELECT count(*) FROM journal), (SELECT count(*) FROM payloads), (SELECT count(*) FROM routes),
		(SELECT count(*) FROM targets)`).
		Scan(&c.messages, &c.deliveries, &c.journal, &c.payloads, &c.routes, &c.targets)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unchanged fails the test when the counts moved since before.
func (b *bundle) unchanged(t *testing.T, before counts) {
	t.Helper()
	if after := b.counts(t); after != before {
		t.Errorf("rows changed: %+v, then %+v", before, after)
	}
}

// target creates an enabled http target over the API and a route to it
// from source erp for any parties.
func (b *bundle) target(t *testing.T, name string, more map[string]any) {
	t.Helper()
	spec := map[string]any{"name": name, "kind": "http", "config": map[string]any{"url": "http://127.0.0.1:9/"}}
	for k, v := range more {
		spec[k] = v
	}
	b.admin(t, http.MethodPost, "/targets", spec).want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: name}).
		want(t, http.StatusCreated, nil)
}

// ingest posts a text message from erp and returns the resource.
func (b *bundle) ingest(t *testing.T, token string, req httpapi.IngestRequest) httpapi.Message {
	t.Helper()
	if req.Source == "" {
		req.Source, req.From, req.To = "erp", "acme", "globex"
	}
	if req.Payload == nil && req.PayloadBase64 == nil {
		req.Payload = new(fmt.Sprintf("message %s", uuid.NewString()))
	}
	var m httpapi.Message
	b.as(t, token, http.MethodPost, "/messages", req).want(t, http.StatusCreated, &m)
	return m
}

// fail settles a delivery as failed, as its worker would.
func (b *bundle) fail(t *testing.T, deliveryID uuid.UUID) *projection.Message {
	t.Helper()
	c, err := b.w.Claim(b.ctx, deliveryID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.w.Complete(b.ctx, deliveryID, c.Token, lifecycle.Failed("503 Service Unavailable"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newMessage is a message from erp, for the Writer directly.
func newMessage() commands.NewMessage {
	return commands.NewMessage{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain", Payload: []byte("hello")}
}
