package httpapi_test

import (
	"net/http"
	"reflect"
	"strings"
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
	if !reflect.DeepEqual(got, rt) {
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
	if len(list.Items) != 1 || !reflect.DeepEqual(list.Items[0], got) {
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

// TestRouteTypesAndFilter: a filter that does not compile is refused with
// its position and nothing is saved; a route's types and filter decide which
// messages it takes, by type, payload field and header.
func TestRouteTypesAndFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"billing", "eu"} {
		b.admin(t, http.MethodPost, "/targets", map[string]any{"name": name, "kind": "http",
			"config": map[string]string{"url": "http://127.0.0.1:9/"}}).want(t, http.StatusCreated, nil)
	}
	before := b.counts(t)
	e := b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "billing",
		Filter: "message.payload.amount >"}).invalidField(t, "filter")
	if !strings.Contains(e.Details.Problem, "at 1:25:") {
		t.Errorf("the problem gives no position: %q", e.Details.Problem)
	}
	e = b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "billing",
		Filter: "message.amount > 1"}).invalidField(t, "filter")
	if !strings.Contains(e.Details.Problem, `message has no field "amount"`) {
		t.Errorf("problem %q", e.Details.Problem)
	}
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "billing",
		Filter: `"yes"`}).invalidField(t, "filter")
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "billing",
		Types: []string{"invoice.*", "in*voice"}}).invalidField(t, "types[1]")
	b.unchanged(t, before)

	var billing lifecycle.Route
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "billing",
		Types: []string{"invoice.*"}, Filter: "message.payload.amount > 1000"}).want(t, http.StatusCreated, &billing)
	if !reflect.DeepEqual(billing.Types, []string{"invoice.*"}) || billing.Filter != "message.payload.amount > 1000" {
		t.Errorf("created %+v", billing)
	}
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "eu",
		Filter: `message.headers[?"x-region"].orValue("") == "eu"`}).want(t, http.StatusCreated, nil)

	for _, tc := range []struct {
		name, typ, payload string
		headers            map[string]string
		targets            []string
		status             lifecycle.MessageStatus
	}{
		{"large invoice", "invoice.paid", `{"amount": 1500}`, nil, []string{"billing"}, lifecycle.StatusInProgress},
		{"small invoice", "invoice.paid", `{"amount": 15}`, nil, nil, lifecycle.StatusNotRouted},
		{"large order", "order.created", `{"amount": 1500}`, nil, nil, lifecycle.StatusNotRouted},
		{"eu invoice", "invoice.paid", `{"amount": 1500}`, map[string]string{"X-Region": "eu"}, []string{"billing", "eu"}, lifecycle.StatusInProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := b.ingest(t, ingestToken, httpapi.IngestRequest{Source: "erp", From: "acme", To: "globex", Type: tc.typ,
				Payload: &tc.payload, ContentType: "application/json", Headers: tc.headers})
			var targets []string
			for _, d := range m.Deliveries {
				targets = append(targets, d.Target)
			}
			if !reflect.DeepEqual(targets, tc.targets) || m.Status != tc.status {
				t.Errorf("%s to %v, want %s to %v", m.Status, targets, tc.status, tc.targets)
			}
		})
	}
}
