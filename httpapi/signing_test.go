package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// TestTargetSecretForAdminsOnly: a target's signing keys are shown by
// GET /targets/{name}/secret to an admin, and nowhere to a reader.
func TestTargetSecretForAdminsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var made lifecycle.Target
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "signed", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/in"}}).want(t, http.StatusCreated, &made)
	if made.Signing == nil || made.Signing.Scheme != "hmac-sha256" || len(made.Signing.Keys) != 1 || made.Signing.Key != "" {
		t.Fatalf("made with signing %+v", made.Signing)
	}
	var secret httpapi.TargetSecret
	b.admin(t, http.MethodGet, "/targets/signed/secret", nil).want(t, http.StatusOK, &secret)
	if secret.Scheme != "hmac-sha256" || len(secret.Keys) != 1 || secret.Keys[0].ID != made.Signing.Keys[0] ||
		!strings.HasPrefix(secret.Keys[0].Secret, "whsec_") || secret.Keys[0].PublicKey != "" {
		t.Fatalf("secret %+v", secret)
	}
	b.as(t, readerToken, http.MethodGet, "/targets/signed/secret", nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	for _, path := range []string{"/targets", "/targets/signed", "/journal?limit=1000"} {
		r := b.as(t, readerToken, http.MethodGet, path, nil).want(t, http.StatusOK, nil)
		if strings.Contains(string(r.body), "whsec_") || strings.Contains(string(r.body), secret.Keys[0].Secret[len("whsec_"):]) {
			t.Fatalf("a reader sees a key at %s: %s", path, r.body)
		}
	}
	b.admin(t, http.MethodGet, "/targets/nobody/secret", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)

	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "ed", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/in"}, "signing": map[string]any{"scheme": "ed25519"}}).
		want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodGet, "/targets/ed/secret", nil).want(t, http.StatusOK, &secret)
	if len(secret.Keys) != 1 || !strings.HasPrefix(secret.Keys[0].Secret, "whsk_") || !strings.HasPrefix(secret.Keys[0].PublicKey, "whpk_") {
		t.Fatalf("ed25519 secret %+v", secret)
	}
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "plain", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/in"}, "signing": map[string]any{"scheme": "none"}}).
		want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodGet, "/targets/plain/secret", nil).want(t, http.StatusOK, &secret)
	if secret.Scheme != "none" || len(secret.Keys) != 0 {
		t.Fatalf("unsigned secret %+v", secret)
	}
}

func TestTargetSigningRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	for field, signing := range map[string]map[string]any{
		"signing.scheme": {"scheme": "rsa"},
		"signing.key":    {"scheme": "hmac-sha256", "key": "whsec_c2hvcnQ="},
	} {
		e := b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "bad", "kind": "http",
			"config": map[string]any{"url": "http://127.0.0.1:9/in"}, "signing": signing}).invalidField(t, field)
		if !strings.Contains(e.Details.Problem, "allowed") && !strings.Contains(e.Details.Problem, "base64") {
			t.Errorf("%s: the problem %q says not what is allowed", field, e.Details.Problem)
		}
	}
	if after := b.counts(t); after != before {
		t.Fatalf("a refused target changed the tables: %+v, was %+v", after, before)
	}
}
