package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

func TestRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "http",
		"config": map[string]string{"url": "http://127.0.0.1:9/"}}).want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "archive", "kind": "file",
		"config": map[string]string{"dir": "/tmp"}}).want(t, http.StatusCreated, nil)
	changes := b.changes.Load()
	before := b.counts(t)

	// Refused before anything: an unknown target, bad fields, an id.
	e := b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "nowhere"}).
		invalidField(t, "target")
	if e.Details.Problem != `no target is named "nowhere"` {
		t.Errorf("details %+v", e.Details)
	}
	e = b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "Erp", From: "", To: "*", Target: "billing"}).
		invalidField(t, "source")
	if len(e.Details.Errors) != 2 || e.Details.Errors[1].Field != "from" {
		t.Errorf("details %+v", e.Details)
	}
	b.admin(t, http.MethodPost, "/routes", map[string]string{"id": uuid.NewString(), "source": "erp", "from": "*", "to": "*", "target": "billing"}).
		invalidField(t, "id")
	b.send(t, adminToken, http.MethodPost, "/routes", "application/xml", []byte("<route/>")).
		fails(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMediaType)
	b.unchanged(t, before)
	if b.changes.Load() != changes {
		t.Error("a refused change was reported")
	}

	var rt lifecycle.Route
	r := b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "acme", To: "*", Target: "billing"}).
		want(t, http.StatusCreated, &rt)
	if rt.ID == uuid.Nil || rt.Source != "erp" || rt.From != "acme" || rt.To != "*" || rt.Target != "billing" ||
		r.header.Get("Location") != httpapi.Prefix+"/routes/"+rt.ID.String() {
		t.Errorf("created %+v at %q", rt, r.header.Get("Location"))
	}
	if b.changes.Load() != changes+1 {
		t.Errorf("%d changes reported, want 1", b.changes.Load()-changes)
	}
	var got lifecycle.Route
	b.as(t, readerToken, http.MethodGet, "/routes/"+rt.ID.String(), nil).want(t, http.StatusOK, &got)
	if got != rt {
		t.Errorf("read %+v, want %+v", got, rt)
	}

	b.admin(t, http.MethodPut, "/routes/"+rt.ID.String(), httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "archive"}).
		want(t, http.StatusOK, &got)
	if got.ID != rt.ID || got.Target != "archive" || got.From != "*" {
		t.Errorf("updated %+v", got)
	}
	b.admin(t, http.MethodPut, "/routes/"+uuid.NewString(), httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "archive"}).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodPut, "/routes/"+rt.ID.String(), httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "gone"}).
		invalidField(t, "target")

	var list httpapi.RouteList
	b.as(t, readerToken, http.MethodGet, "/routes", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0] != got {
		t.Errorf("list %+v", list)
	}

	b.admin(t, http.MethodDelete, "/routes/"+rt.ID.String(), nil).want(t, http.StatusNoContent, nil)
	b.admin(t, http.MethodDelete, "/routes/"+rt.ID.String(), nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.as(t, readerToken, http.MethodGet, "/routes/"+rt.ID.String(), nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.as(t, readerToken, http.MethodGet, "/routes/x", nil).invalidField(t, "id")
	b.as(t, readerToken, http.MethodGet, "/routes", nil).want(t, http.StatusOK, &list)
	if list.Items == nil || len(list.Items) != 0 {
		t.Errorf("list %+v", list)
	}
	if n := b.changes.Load() - changes; n != 3 {
		t.Errorf("%d changes reported, want 3", n)
	}
}
