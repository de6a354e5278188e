package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// TestTargetHealth: a target's answer shows its health beside its policy;
// a breaker opened by failures holds the target's other deliveries; an
// admin closes it by hand, a reader may not; an answer sent back is
// accepted, its figures ignored.
func TestTargetHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", map[string]any{"health": map[string]any{"breaker": map[string]any{"min_requests": 1, "failure_rate": 1}}})
	// shown is a target's answer, its health's figures as written (a
	// lifecycle.Target ignores them).
	type shown struct {
		Health struct {
			Breaker      *lifecycle.Breaker    `json:"breaker"`
			DisableAfter *lifecycle.Duration   `json:"disable_after"`
			State        lifecycle.HealthState `json:"state"`
			Until        time.Time             `json:"until"`
			FailingSince time.Time             `json:"failing_since"`
			Held         *int                  `json:"held"`
		} `json:"health"`
	}
	var got shown
	b.admin(t, http.MethodGet, "/targets/billing", nil).want(t, http.StatusOK, &got)
	if h := got.Health; h.State != lifecycle.HealthClosed || h.Held == nil || *h.Held != 0 ||
		h.Breaker == nil || h.Breaker.MinRequests != 1 || h.Breaker.Window != lifecycle.Duration(time.Minute) || h.DisableAfter == nil {
		t.Fatalf("health %+v", got.Health)
	}

	first := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
	b.fail(t, first.Deliveries[0].ID)
	var list struct{ Items []shown }
	b.admin(t, http.MethodGet, "/targets", nil).want(t, http.StatusOK, &list)
	if h := list.Items[0].Health; h.State != lifecycle.HealthOpen || *h.Held != 1 || h.Until.IsZero() || h.FailingSince.IsZero() {
		t.Fatalf("after a failure: %+v", h)
	}

	b.as(t, readerToken, http.MethodPost, "/targets/billing/health/close", nil).want(t, http.StatusForbidden, nil)
	b.admin(t, http.MethodPost, "/targets/nowhere/health/close", nil).want(t, http.StatusNotFound, nil)
	b.admin(t, http.MethodPost, "/targets/billing/health/close", nil).want(t, http.StatusOK, &got)
	if h := got.Health; h.State != lifecycle.HealthClosed || *h.Held != 0 {
		t.Fatalf("closed by hand: %+v", h)
	}

	// The answer sent back as it is: its figures are ignored.
	var raw map[string]any
	b.admin(t, http.MethodGet, "/targets/billing", nil).want(t, http.StatusOK, &raw)
	b.admin(t, http.MethodPut, "/targets/billing", raw).want(t, http.StatusOK, &got)
	if got.Health.Breaker.MinRequests != 1 {
		t.Fatalf("after a PUT of the answer: %+v", got.Health)
	}
}
