package httpapi_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// TestTargetSecretsShownOnlyToAdmins: a token that may not administer sees
// a target's header values and its URL's password written ***, in the
// targets and in the journal's target.created and target.updated; an
// admin, who writes them, sees them whole.
func TestTargetSecretsShownOnlyToAdmins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const name = "secretive"
	define := func(method, path, token string, status int) {
		b.admin(t, method, path, map[string]any{"name": name, "kind": "http", "config": map[string]any{
			"url": "http://hook:pw-s3cret@127.0.0.1:9/in", "headers": map[string]any{"Authorization": "Bearer " + token}}}).
			want(t, status, nil)
	}
	define(http.MethodPost, "/targets", "t0ken-created", http.StatusCreated)
	define(http.MethodPut, "/targets/"+name, "t0ken-updated", http.StatusOK)

	const masked = `"url":"http://hook:***@127.0.0.1:9/in","method":"POST","headers":{"Authorization":"***"}`
	var list httpapi.TargetList
	b.as(t, readerToken, http.MethodGet, "/targets", nil).want(t, http.StatusOK, &list)
	i := slices.IndexFunc(list.Items, func(t lifecycle.Target) bool { return t.Name == name })
	var one lifecycle.Target
	b.as(t, readerToken, http.MethodGet, "/targets/"+name, nil).want(t, http.StatusOK, &one)
	if i < 0 || !strings.Contains(string(list.Items[i].Config), masked) || !strings.Contains(string(one.Config), masked) {
		t.Errorf("a reader sees the target as %+v and %s; want %s", list.Items, one.Config, masked)
	}
	var whole lifecycle.Target
	b.admin(t, http.MethodGet, "/targets/"+name, nil).want(t, http.StatusOK, &whole)
	if !strings.Contains(string(whole.Config), "pw-s3cret") || !strings.Contains(string(whole.Config), "Bearer t0ken-updated") {
		t.Errorf("an admin sees the target as %s", whole.Config)
	}

	// The journal holds both definitions. A page may end early while
	// another test's transaction is open, so read on until both come.
	for token, admin := range map[string]bool{readerToken: false, adminToken: true} {
		seen := map[journal.Kind]string{}
		cursor := ""
		testpoll.Until(t, token+" reads the target's two events in the journal", func() bool {
			var page httpapi.JournalPage
			b.as(t, token, http.MethodGet, "/journal?limit=1000&cursor="+url.QueryEscape(cursor), nil).want(t, http.StatusOK, &page)
			for _, e := range page.Items {
				if (e.Kind == journal.KindTargetCreated || e.Kind == journal.KindTargetUpdated) && strings.Contains(string(e.Payload), `"`+name+`"`) {
					seen[e.Kind] = string(e.Payload)
				}
			}
			cursor = page.NextCursor
			return len(seen) == 2
		})
		for kind, p := range seen {
			if strings.Contains(p, "s3cret") != admin || strings.Contains(p, "t0ken") != admin || !admin && !strings.Contains(p, masked) {
				t.Errorf("%s sees the journal's %s as %s", token, kind, p)
			}
		}
	}
}
