package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/waybill/waybill/lifecycle"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var s lifecycle.Settings
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	if s != lifecycle.DefaultSettings() {
		t.Errorf("settings %+v", s)
	}
	before := b.counts(t)
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 21}}).
		invalidField(t, "delivery.max_dispatches")
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 3, "max_attempts": 1}}).
		invalidField(t, "delivery.max_attempts")
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": "3"}}).
		invalidField(t, "delivery.max_dispatches")
	b.admin(t, http.MethodPut, "/settings", map[string]any{}).invalidField(t, "delivery.max_dispatches")
	b.unchanged(t, before)

	b.admin(t, http.MethodPut, "/settings", lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 20}}).
		want(t, http.StatusOK, &s)
	if s.Delivery.MaxDispatches != 20 {
		t.Errorf("put answered %+v", s)
	}
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	if s.Delivery.MaxDispatches != 20 || b.changes.Load() != 1 {
		t.Errorf("settings %+v after %d changes", s, b.changes.Load())
	}
}
