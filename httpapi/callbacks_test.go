package httpapi_test

import (
	"net/http"
	"testing"

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
