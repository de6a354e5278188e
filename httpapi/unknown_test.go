package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/service"
)

// TestUnknownIDsAreNotFound: every command the API runs on a message or a
// delivery answers an id nothing has, the nil UUID among them, with 404
// NOT_FOUND and writes nothing; the Writer serves on after all of them,
// each sent twice, and an ingest is answered in time.
func TestUnknownIDsAreNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b.ctx = ctx // a wedged Writer fails the test rather than hang it
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	known, knownDelivery := m.ID.String(), m.Deliveries[0].ID.String()
	before := b.counts(t)
	for _, unknown := range []string{uuid.Nil.String(), uuid.NewString()} {
		paths := []string{
			"/messages/" + unknown + "/redispatch",
			"/messages/" + unknown + "/resend",
			"/messages/" + unknown + "/replay",
			"/messages/" + unknown + "/deliveries/" + unknown + "/redeliver",
			"/messages/" + unknown + "/deliveries/" + unknown + "/skip",
			"/messages/" + unknown + "/deliveries/" + knownDelivery + "/redeliver",
			"/messages/" + unknown + "/deliveries/" + knownDelivery + "/skip",
			"/messages/" + known + "/deliveries/" + unknown + "/redeliver",
			"/messages/" + known + "/deliveries/" + unknown + "/skip",
			"/operations/" + unknown + "/cancel",
		}
		for _, path := range paths {
			for range 2 {
				b.act(t, path, "", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
			}
		}
		for range 2 {
			b.admin(t, http.MethodPost, "/deliveries/"+unknown+"/receipt", httpapi.ReceiptRequest{Outcome: httpapi.ReceiptPositive}).
				fails(t, http.StatusNotFound, httpapi.CodeNotFound)
		}
	}
	b.unchanged(t, before)
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
}

// TestEveryRouteRefusesUnknownParameters: every route but the webhook's,
// whose query is not read, refuses a query parameter it does not take,
// and one it takes given twice, with 400 naming it, and changes nothing.
func TestEveryRouteRefusesUnknownParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	before := b.counts(t)
	for _, rt := range httpapi.Routes() {
		if rt.Path == "/sources/{name}/webhook" {
			continue
		}
		path := strings.NewReplacer("{id}", m.ID.String(), "{delivery_id}", m.Deliveries[0].ID.String(), "{name}", "billing").Replace(rt.Path)
		send := func(query string) *reply {
			return b.send(t, adminToken, rt.Method, path+"?"+query, "application/json", []byte("{}"))
		}
		send("bogus=1").invalidField(t, "bogus")
		send("x=1&x=2").invalidField(t, "x")
		for _, p := range rt.Params {
			send(p+"=1&"+p+"=2").invalidField(t, p)
		}
	}
	b.unchanged(t, before)

	e := b.admin(t, http.MethodGet, "/routes?source=crm", nil).invalidField(t, "source")
	if e.Details.Problem != "is not a parameter here: none is allowed" {
		t.Errorf("problem %q", e.Details.Problem)
	}
	e = b.admin(t, http.MethodGet, "/targets?limit=-5&bogus=1", nil).invalidField(t, "bogus")
	if len(e.Details.Errors) != 2 || e.Details.Errors[1].Field != "limit" {
		t.Errorf("every wrong parameter is listed: %+v", e.Details)
	}
	e = b.act(t, "/messages/"+m.ID.String()+"/redispatch", "", `{"reason":"x"}`).invalidField(t, "reason")
	if e.Details.Problem != "is not a field here: none is allowed" {
		t.Errorf("problem %q", e.Details.Problem)
	}
	e = b.admin(t, http.MethodGet, "/operations?page=2", nil).invalidField(t, "page")
	if !strings.Contains(e.Details.Problem, "allowed are limit, cursor") {
		t.Errorf("problem %q", e.Details.Problem)
	}
}

// panicky is an Authenticator that panics on the token "panic".
type panicky struct{ tokens }

func (p panicky) Authenticate(ctx context.Context, token string) (auth.Identity, error) {
	if token == "panic" {
		panic("boom")
	}
	return p.tokens.Authenticate(ctx, token)
}

// TestHandlerPanicIsInternal: a panic while serving a request is answered
// with one 500 INTERNAL envelope, not a dropped connection, and the server
// serves on.
func TestHandlerPanicIsInternal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	api, err := httpapi.New(httpapi.Config{Writer: b.w, DB: b.db, Auth: panicky{testTokens}, Base: service.Base{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	get := func(token string) (int, httpapi.ErrorResponse) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+httpapi.Prefix+"/targets", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e httpapi.ErrorResponse
		if resp.StatusCode != http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("status %d: %v", resp.StatusCode, err)
			}
		}
		return resp.StatusCode, e
	}
	if status, e := get("panic"); status != http.StatusInternalServerError || e.Error.Code != httpapi.CodeInternal {
		t.Fatalf("status %d, %+v: want 500 %s", status, e, httpapi.CodeInternal)
	}
	if status, e := get(readerToken); status != http.StatusOK {
		t.Fatalf("status %d after a panic: %+v", status, e)
	}
}
