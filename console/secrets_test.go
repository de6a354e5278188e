package console_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// TestTargetSecretsShownOnlyToAdmins: a session that may not administer
// sees a target's header values and its URL's password written ***; an
// admin's sees them whole.
func TestTargetSecretsShownOnlyToAdmins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "secretive", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://hook:pw-s3cret@127.0.0.1:9/in","headers":{"Authorization":"Bearer t0ken"}}`)},
		"operator:setup"); err != nil {
		t.Fatal(err)
	}
	reader := b.signedIn(t, b.reader)
	reader.get(t, "/ui/targets").want(t, http.StatusOK).has(t, `href="/ui/targets/secretive"`).lacks(t, "s3cret", "t0ken")
	reader.get(t, "/ui/targets/secretive").want(t, http.StatusOK).
		has(t, html.EscapeString(`"url": "http://hook:***@127.0.0.1:9/in"`), html.EscapeString(`"Authorization": "***"`)).
		lacks(t, "s3cret", "t0ken")
	b.signedIn(t, b.admin).get(t, "/ui/targets/secretive").want(t, http.StatusOK).
		has(t, html.EscapeString(`"url": "http://hook:pw-s3cret@127.0.0.1:9/in"`), html.EscapeString(`"Authorization": "Bearer t0ken"`))
}

// TestTransformHeadersShownOnlyToAdmins: the "try it" box shows a
// reader's session the values of the headers a transform sets written
// ***, an admin's whole.
func TestTransformHeadersShownOnlyToAdmins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/in"}`), Transform: `{"headers": {"x-account": "acct-" + message.payload.id}}`},
		"operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	form := func() url.Values {
		return url.Values{"source": {"erp"}, "from": {"a"}, "to": {"b"}, "content_type": {"application/json"}, "payload": {`{"id": "s3cret"}`}}
	}
	reader, admin := b.signedIn(t, b.reader), b.signedIn(t, b.admin)
	reader.get(t, "/ui/try").want(t, http.StatusOK)
	reader.post(t, "/ui/try", form()).want(t, http.StatusOK).has(t, "x-account: ***").lacks(t, "acct-s3cret")
	admin.get(t, "/ui/try").want(t, http.StatusOK)
	admin.post(t, "/ui/try", form()).want(t, http.StatusOK).has(t, "x-account: acct-s3cret")
}

// TestTargetKeysShownByIDAndRevealedOnAsking: every session sees a signing
// target's scheme and its keys' ids and fingerprints; the key itself is
// only on the answer to an admin's confirmed Reveal.
func TestTargetKeysShownByIDAndRevealedOnAsking(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "signed", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/in"}`), Signing: &lifecycle.Signing{Key: key}}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	keys, err := b.w.TargetKeys(b.ctx, "signed")
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v: %v", keys, err)
	}
	reader := b.signedIn(t, b.reader)
	reader.get(t, "/ui/targets/signed").want(t, http.StatusOK).
		has(t, "hmac-sha256", keys[0].ID, keys[0].Fingerprint()).lacks(t, key, "/ui/targets/signed/secret")
	reader.get(t, "/ui/targets/signed/secret").want(t, http.StatusForbidden).lacks(t, key)

	admin := b.signedIn(t, b.admin)
	admin.get(t, "/ui/targets/signed").want(t, http.StatusOK).has(t, `href="/ui/targets/signed/secret"`).lacks(t, key)
	admin.get(t, "/ui/targets/signed/secret").want(t, http.StatusOK).has(t, "Reveal the signing keys of signed?").lacks(t, key)
	admin.post(t, "/ui/targets/signed/secret", nil).want(t, http.StatusOK).has(t, key, keys[0].ID)
	admin.get(t, "/ui/targets/nope/secret").want(t, http.StatusNotFound)

	// Rotate, behind its confirmation: both keys sign during the grace.
	reader.get(t, "/ui/targets/signed/secret/rotate").want(t, http.StatusForbidden)
	admin.get(t, "/ui/targets/signed/secret/rotate").want(t, http.StatusOK).has(t, "Rotate the signing key of signed?", `value="24h0m0s"`)
	admin.post(t, "/ui/targets/signed/secret/rotate", url.Values{"grace": {"8d"}}).want(t, http.StatusBadRequest).has(t, "grace")
	admin.post(t, "/ui/targets/signed/secret/rotate", url.Values{"grace": {"200h"}}).want(t, http.StatusBadRequest).has(t, "grace")
	admin.post(t, "/ui/targets/signed/secret/rotate", url.Values{"grace": {"1h"}}).want(t, http.StatusSeeOther)
	if keys, err = b.w.TargetKeys(b.ctx, "signed"); err != nil || len(keys) != 2 || keys[0].ExpiresAt.IsZero() {
		t.Fatalf("keys after the rotation %+v: %v", keys, err)
	}
	admin.get(t, "/ui/targets/signed").want(t, http.StatusOK).has(t, keys[0].ID, keys[1].ID, keys[0].ExpiresAt.UTC().Format(time.RFC3339))
}
