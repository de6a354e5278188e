package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// TestIngestWithACallback: a callback URL must be an absolute http or
// https URL; the message resource shows its callback, queued once it
// settles (here at once: nothing routes it).
func TestIngestWithACallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	for _, bad := range []string{"ftp://erp.example/cb", "/relative", "http://"} {
		b.as(t, ingestToken, http.MethodPost, "/messages", map[string]any{"source": "erp", "from": "a", "to": "b",
			"payload": "x", "callback_url": bad}).invalidField(t, "callback_url")
	}
	b.unchanged(t, before)

	m := b.ingest(t, ingestToken, httpapi.IngestRequest{Source: "crm", From: "a", To: "b", CallbackURL: "https://crm.example/cb"})
	cb := m.Callback
	if cb == nil || cb.URL != "https://crm.example/cb" || cb.Seq != 1 || cb.State == nil || *cb.State != lifecycle.StateQueued ||
		cb.NextAttemptAt == nil || cb.Attempts != 0 || cb.LastError != nil {
		t.Fatalf("callback %+v", cb)
	}
	var plain httpapi.Message
	b.admin(t, http.MethodGet, "/messages/"+b.ingest(t, ingestToken, httpapi.IngestRequest{}).ID.String(), nil).want(t, http.StatusOK, &plain)
	if plain.Callback != nil {
		t.Errorf("a message without a callback URL shows %+v", plain.Callback)
	}
}

// TestCallbackMaxAttemptsSetting: the setting has its default, is kept
// when given and refused out of bounds.
func TestCallbackMaxAttemptsSetting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got lifecycle.Settings
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &got)
	if got.CallbackMaxAttempts != 10 {
		t.Fatalf("default %+v", got)
	}
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 3}}).want(t, http.StatusOK, &got)
	if got.CallbackMaxAttempts != 10 || got.Delivery.MaxDispatches != 3 {
		t.Fatalf("left out: %+v", got)
	}
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 3},
		"callback_max_attempts": 101}).invalidField(t, "callback_max_attempts")
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 3},
		"callback_max_attempts": 2}).want(t, http.StatusOK, nil)
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &got)
	if got.CallbackMaxAttempts != 2 {
		t.Fatalf("kept: %+v", got)
	}
}

// TestCallbackURLGuard: a callback URL whose host is a special address
// written literally, or localhost, is refused at ingest naming the setting
// that would allow it, before anything is stored or sent; a listed network
// lets it through. A non-empty allowed_hosts refuses every other host.
func TestCallbackURLGuard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	refused := func(url, setting string) {
		t.Helper()
		e := b.as(t, ingestToken, http.MethodPost, "/messages", map[string]any{"source": "erp", "from": "a", "to": "b",
			"payload": "x", "callback_url": url}).invalidField(t, "callback_url")
		if !strings.Contains(e.Details.Problem, setting) {
			t.Errorf("%s: %q does not name %s", url, e.Details.Problem, setting)
		}
	}
	for _, url := range []string{"http://127.0.0.1:8080/cb", "http://localhost/cb", "http://LOCALHOST./cb", "http://[::1]:9/",
		"http://[::ffff:127.0.0.1]/", "http://10.0.0.5/", "http://192.168.1.1/", "http://172.16.0.1/", "http://169.254.169.254/latest/meta-data/",
		"http://100.64.0.1/", "http://0.0.0.0:9/", "http://[fd00::1]/", "http://[fe80::1]/", "http://224.0.0.1/"} {
		refused(url, "callbacks.allowed_networks")
	}
	b.unchanged(t, before)

	b.admin(t, http.MethodPut, "/settings", map[string]any{"callbacks": map[string]any{"allowed_networks": []string{"127.0.0.0/8"}}}).
		want(t, http.StatusOK, nil)
	for _, url := range []string{"http://127.0.0.1:8080/cb", "http://localhost/cb", "https://crm.example/cb"} {
		b.ingest(t, ingestToken, httpapi.IngestRequest{CallbackURL: url})
	}
	refused("http://[::1]:9/", "callbacks.allowed_networks")
	refused("http://10.0.0.5/", "callbacks.allowed_networks")

	b.admin(t, http.MethodPut, "/settings", map[string]any{"callbacks": map[string]any{
		"allowed_networks": []string{"127.0.0.0/8"}, "allowed_hosts": []string{"*.example.com", "127.0.0.1"}}}).want(t, http.StatusOK, nil)
	for _, url := range []string{"https://hooks.example.com/cb", "http://127.0.0.1:9/"} {
		b.ingest(t, ingestToken, httpapi.IngestRequest{CallbackURL: url})
	}
	for _, url := range []string{"https://crm.example/cb", "https://example.com/cb", "http://localhost/cb"} {
		refused(url, "callbacks.allowed_hosts")
	}
}

// TestCallbackSettings: the lists are empty by default, kept as given,
// and a wrong entry is refused naming its list.
func TestCallbackSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var got lifecycle.Settings
	r := b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &got)
	if !strings.Contains(string(r.body), `"callbacks":{"allowed_networks":[],"allowed_hosts":[],"signing":{"scheme":"hmac-sha256"}}`) {
		t.Errorf("defaults %s", r.body)
	}
	before := b.counts(t)
	for field, callbacks := range map[string]map[string]any{
		"callbacks.allowed_networks": {"allowed_networks": []string{"127.0.0.1"}},
		"callbacks.allowed_hosts":    {"allowed_hosts": []string{"https://hooks.example.com"}},
	} {
		b.admin(t, http.MethodPut, "/settings", map[string]any{"callbacks": callbacks}).invalidField(t, field)
	}
	b.admin(t, http.MethodPut, "/settings", map[string]any{"callbacks": map[string]any{"allowed_networks": "10.0.0.0/8"}}).
		invalidField(t, "callbacks.allowed_networks")
	b.unchanged(t, before)
	b.admin(t, http.MethodPut, "/settings", map[string]any{"callbacks": map[string]any{
		"allowed_networks": []string{"10.1.0.0/16", "fd00::/8"}, "allowed_hosts": []string{"*.example.com"}}}).want(t, http.StatusOK, nil)
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &got)
	if c := got.Callbacks; !slices.Equal(c.AllowedNetworks, []string{"10.1.0.0/16", "fd00::/8"}) || !slices.Equal(c.AllowedHosts, []string{"*.example.com"}) {
		t.Errorf("kept %+v", c)
	}
}

// TestIngestTokenSeesNoRemoteWords: what a receiver or a callback's server
// answered is shown to admin and reader tokens; an ingest token, on the
// answer to a repeat, sees the status and each error's code only.
func TestIngestTokenSeesNoRemoteWords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	req := httpapi.IngestRequest{Source: "erp", From: "a", To: "b", Payload: new("x"), IdempotencyKey: "k",
		CallbackURL: "https://crm.example/cb"}
	m := b.ingest(t, ingestToken, req)
	b.fail(t, m.Deliveries[0].ID) // 503 Service Unavailable
	claim, err := b.w.ClaimCallback(b.ctx, m.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	secret := "500 Internal Server Error: ami-id=secret"
	if _, err := b.w.CompleteCallback(b.ctx, m.ID, claim.Token, lifecycle.Retry(b.clock.Now().Add(time.Hour), secret)); err != nil {
		t.Fatal(err)
	}

	var seen httpapi.Message
	r := b.as(t, ingestToken, http.MethodPost, "/messages", req).want(t, http.StatusOK, &seen)
	if strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), "Unavailable") {
		t.Errorf("the ingest token reads %s", r.body)
	}
	if seen.Status != lifecycle.StatusError || *seen.Error != "HTTP 503" || *seen.Deliveries[0].LastError != "HTTP 503" ||
		*seen.Callback.LastError != "HTTP 500" {
		t.Errorf("the ingest token sees %+v", seen)
	}
	for _, token := range []string{readerToken, adminToken} {
		b.as(t, token, http.MethodGet, "/messages/"+m.ID.String(), nil).want(t, http.StatusOK, &seen)
		if *seen.Callback.LastError != secret || *seen.Deliveries[0].LastError != "503 Service Unavailable" {
			t.Errorf("%s sees %+v", token, seen)
		}
	}
}
