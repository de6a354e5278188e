package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

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

// TestRotateTargetSecret: a rotation through the API keeps the old key
// signing for the grace beside the new one, and only an admin may make
// it or see the keys.
func TestRotateTargetSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "signed", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/in"}}).want(t, http.StatusCreated, nil)
	var before, after httpapi.TargetSecret
	b.admin(t, http.MethodGet, "/targets/signed/secret", nil).want(t, http.StatusOK, &before)

	// No body: the default grace of 24 hours.
	b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", nil).want(t, http.StatusOK, &after)
	if len(after.Keys) != 2 || after.Keys[0].ID != before.Keys[0].ID || after.Keys[0].ExpiresAt == nil ||
		!after.Keys[0].ExpiresAt.Equal(b.clock.Now().Add(24*time.Hour)) || after.Keys[1].ExpiresAt != nil {
		t.Fatalf("after a rotation %+v", after)
	}
	var def lifecycle.Target
	b.admin(t, http.MethodGet, "/targets/signed", nil).want(t, http.StatusOK, &def)
	if len(def.Signing.Keys) != 2 || def.Signing.Keys[1] != after.Keys[1].ID {
		t.Fatalf("the definition's keys %v", def.Signing.Keys)
	}
	// A key given, with a grace of its own: the first key keeps its
	// sooner end.
	given := "whsec_" + strings.Repeat("A", 43) + "="
	b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", map[string]any{"grace": "48h", "key": given}).
		want(t, http.StatusOK, &after)
	if len(after.Keys) != 3 || after.Keys[2].Secret != given || !after.Keys[0].ExpiresAt.Equal(b.clock.Now().Add(24*time.Hour)) ||
		!after.Keys[1].ExpiresAt.Equal(b.clock.Now().Add(48*time.Hour)) {
		t.Fatalf("after a rotation with a key given %+v", after)
	}
	b.clock.Advance(24 * time.Hour)
	b.admin(t, http.MethodGet, "/targets/signed/secret", nil).want(t, http.StatusOK, &after)
	if len(after.Keys) != 2 {
		t.Fatalf("after the first grace %+v", after)
	}

	// Refusals change nothing.
	counts := b.counts(t)
	for field, body := range map[string]map[string]any{
		"grace": {"grace": "169h"},
		"key":   {"key": "whsec_c2hvcnQ="},
		"body":  {"graces": "1h"},
	} {
		r := b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", body)
		if field == "body" {
			r.fails(t, http.StatusBadRequest, httpapi.CodeInvalidField)
			continue
		}
		r.invalidField(t, field)
	}
	b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", map[string]any{"grace": "-1s"}).invalidField(t, "grace")
	b.admin(t, http.MethodPost, "/targets/nobody/secret/rotate", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	for _, token := range []string{readerToken, ingestToken, receiptToken, scopedReaderToken, scopedIngestToken} {
		r := b.as(t, token, http.MethodPost, "/targets/signed/secret/rotate", nil)
		r.fails(t, http.StatusForbidden, httpapi.CodeForbidden)
		if strings.Contains(string(r.body), "whsec_") {
			t.Fatalf("a refusal shows a key: %s", r.body)
		}
	}
	if got := b.counts(t); got != counts {
		t.Fatalf("refused rotations changed the tables: %+v, was %+v", got, counts)
	}

	// Ten keys at most sign at once.
	for range 8 {
		b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", nil).want(t, http.StatusOK, &after)
	}
	if len(after.Keys) != 10 {
		t.Fatalf("%d keys", len(after.Keys))
	}
	e := b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", nil).fails(t, http.StatusConflict, httpapi.CodeTooManyKeys)
	if e.Details.Limit != 10 {
		t.Fatalf("limit %d", e.Details.Limit)
	}
	b.admin(t, http.MethodPost, "/targets/signed/secret/rotate", map[string]any{"grace": "0s"}).want(t, http.StatusOK, &after)
	if len(after.Keys) != 1 {
		t.Fatalf("after a rotation without grace %+v", after)
	}
}

// TestOwnSecrets: the callbacks' and the alert webhook's keys are shown
// and rotated by an admin only, and follow the settings' scheme.
func TestOwnSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, owner := range []string{"callbacks", "alerts"} {
		var secret, rotated httpapi.OwnSecret
		b.admin(t, http.MethodGet, "/"+owner+"/secret", nil).want(t, http.StatusOK, &secret)
		if secret.Owner != owner || secret.Scheme != "hmac-sha256" || len(secret.Keys) != 1 || !strings.HasPrefix(secret.Keys[0].Secret, "whsec_") {
			t.Fatalf("%s: %+v", owner, secret)
		}
		b.admin(t, http.MethodPost, "/"+owner+"/secret/rotate", map[string]any{"grace": "1h"}).want(t, http.StatusOK, &rotated)
		if len(rotated.Keys) != 2 || rotated.Keys[0].ID != secret.Keys[0].ID || rotated.Keys[0].ExpiresAt == nil {
			t.Fatalf("%s rotated: %+v", owner, rotated)
		}
		for _, token := range []string{readerToken, scopedReaderToken} {
			for _, call := range []struct{ method, path string }{{http.MethodGet, "/secret"}, {http.MethodPost, "/secret/rotate"}} {
				r := b.as(t, token, call.method, "/"+owner+call.path, nil)
				r.fails(t, http.StatusForbidden, httpapi.CodeForbidden)
				if strings.Contains(string(r.body), "whsec_") {
					t.Fatalf("a refusal shows a key: %s", r.body)
				}
			}
		}
		r := b.as(t, readerToken, http.MethodGet, "/journal?limit=1000", nil).want(t, http.StatusOK, nil)
		if strings.Contains(string(r.body), rotated.Keys[1].Secret) {
			t.Fatalf("the journal shows a key: %s", r.body)
		}
	}
	var s lifecycle.Settings
	b.admin(t, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	s.Alerts.Signing.Scheme = "none"
	b.admin(t, http.MethodPut, "/settings", s).want(t, http.StatusOK, nil)
	var secret httpapi.OwnSecret
	b.admin(t, http.MethodGet, "/alerts/secret", nil).want(t, http.StatusOK, &secret)
	if secret.Scheme != "none" || len(secret.Keys) != 0 {
		t.Fatalf("unsigned alerts: %+v", secret)
	}
	b.admin(t, http.MethodPost, "/alerts/secret/rotate", nil).invalidField(t, "alerts.signing.scheme")
	s.Callbacks.Signing.Scheme = "rsa"
	b.admin(t, http.MethodPut, "/settings", s).invalidField(t, "callbacks.signing.scheme")
}
