package console_test

import (
	"encoding/json"
	"html"
	"net/http"
	"testing"

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
