package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
)

// TestTryRoutes: POST /routes/try answers each route's verdict, where the
// message would go and what each target's transform makes of it, for a
// message given or stored, and writes nothing; bad input is a 400 naming
// the field, an unknown message 404, a token scoped to sources tries only
// its sources' messages and sees only their routes, and one that may not
// administer sees the headers a transform sets masked.
func TestTryRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", map[string]any{"transform": `{"payload": {"ref": message.payload.id}, "path": "/in/" + message.payload.id, "method": "PUT"}`})
	b.target(t, "qa", map[string]any{"transform": `'x-test' in message.headers ? {'cancel': 'test traffic'} : dyn({'headers': {'x-seen': 'yes'}})`})
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "review", "kind": "http", "config": map[string]any{"url": "http://127.0.0.1:9/"}}).
		want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "review",
		Types: []string{"invoice.*"}, Filter: "message.payload.amount > 1000"}).want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "shop", From: "*", To: "*", Target: "billing"}).
		want(t, http.StatusCreated, nil)
	stored, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Type: "invoice.created",
		ContentType: "application/json", Payload: []byte(`{"id": "in-9", "amount": 5000}`)})
	if err != nil {
		t.Fatal(err)
	}
	shop, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "shop", From: "acme", To: "globex", ContentType: "text/plain", Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	before := b.counts(t)
	try := func(token string, req any) httpapi.Trial {
		t.Helper()
		var tr httpapi.Trial
		b.as(t, token, http.MethodPost, "/routes/try", req).want(t, http.StatusOK, &tr)
		return tr
	}
	verdict := func(tr httpapi.Trial, target string) httpapi.RouteVerdict {
		t.Helper()
		for _, v := range tr.Routes {
			if v.Route.Target == target && v.Route.Source == "erp" {
				return v
			}
		}
		t.Fatalf("no verdict of erp's route to %s: %+v", target, tr.Routes)
		return httpapi.RouteVerdict{}
	}
	shape := func(tr httpapi.Trial, target string) httpapi.TrialShape {
		t.Helper()
		for _, s := range tr.Shapes {
			if s.Target == target {
				return s
			}
		}
		t.Fatalf("no shape of %s: %+v", target, tr.Shapes)
		return httpapi.TrialShape{}
	}

	tr := try(readerToken, map[string]any{"source": "erp", "from": "acme", "to": "globex", "type": "invoice.created",
		"content_type": "application/json", "payload": `{"id": "in-7", "amount": 1250}`})
	if strings.Join(tr.Targets, ",") != "billing,qa,review" || len(tr.Routes) != 4 || len(tr.Shapes) != 3 {
		t.Fatalf("trial: %+v", tr)
	}
	if s := shape(tr, "billing"); s.Outcome != "shaped" || s.Payload != `{"ref":"in-7"}` || s.Path != "/in/in-7" || s.Method != "PUT" ||
		s.ContentType != "application/json" || s.PayloadSize != 14 || len(s.PayloadSHA256) != 64 {
		t.Errorf("billing: %+v", s)
	}
	if s := shape(tr, "qa"); s.Outcome != "shaped" || s.Headers["x-seen"] != "***" || s.Payload != "" {
		t.Errorf("qa, to a reader: %+v", s)
	}
	if s := shape(tr, "review"); s.Outcome != "as_is" {
		t.Errorf("review: %+v", s)
	}
	for _, v := range tr.Routes {
		if v.Route.Source == "shop" && (v.Matched || !strings.Contains(v.Why, "its source is shop")) {
			t.Errorf("shop's route: %+v", v)
		}
	}

	// A filter that fails does not match and says why; a transform that
	// cancels or fails says so.
	tr = try(adminToken, map[string]any{"source": "erp", "from": "acme", "to": "globex", "type": "invoice.created",
		"content_type": "application/json", "headers": map[string]string{"X-Test": "1"}, "payload": `{"name": "x"}`})
	if v := verdict(tr, "review"); v.Matched || !strings.Contains(v.FilterError, "no such key: amount") || !strings.Contains(v.Why, "its filter failed") {
		t.Errorf("review: %+v", v)
	}
	if s := shape(tr, "qa"); s.Outcome != "cancelled" || s.Cancel != "test traffic" {
		t.Errorf("qa: %+v", s)
	}
	if s := shape(tr, "billing"); s.Outcome != "failed" || !strings.Contains(s.Error, "no such key: id") {
		t.Errorf("billing: %+v", s)
	}

	// A stored message, with its payload.
	tr = try(readerToken, map[string]string{"message_id": stored.ID.String()})
	if s := shape(tr, "billing"); strings.Join(tr.Targets, ",") != "billing,qa,review" || s.Payload != `{"ref":"in-9"}` {
		t.Errorf("stored message: %+v", tr)
	}
	// An admin, who writes the transforms, sees the headers they set.
	tr = try(adminToken, map[string]string{"message_id": stored.ID.String()})
	if s := shape(tr, "qa"); s.Outcome != "shaped" || s.Headers["x-seen"] != "yes" {
		t.Errorf("qa, to an admin: %+v", s)
	}

	// Bad input names the field; an unknown message is 404.
	for _, c := range []struct {
		field string
		req   any
	}{
		{"message_id", map[string]string{"message_id": "nope"}},
		{"message_id", map[string]string{"message_id": stored.ID.String(), "source": "erp"}},
		{"payload", map[string]string{"source": "erp", "from": "acme", "to": "globex"}},
		{"type", map[string]string{"source": "erp", "from": "acme", "to": "globex", "type": "no spaces", "payload": "x"}},
		{"headers", map[string]any{"source": "erp", "from": "acme", "to": "globex", "headers": map[string]string{"bad name": "x"}, "payload": "x"}},
		{"source", map[string]string{"source": "Not A Name", "from": "acme", "to": "globex", "payload": "x"}},
		{"extra", map[string]string{"source": "erp", "from": "acme", "to": "globex", "payload": "x", "extra": "1"}},
	} {
		b.as(t, readerToken, http.MethodPost, "/routes/try", c.req).invalidField(t, c.field)
	}
	b.as(t, readerToken, http.MethodPost, "/routes/try", map[string]string{"message_id": uuid.NewString()}).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)

	// Scoped to erp: erp's routes only, and no other source's message.
	tr = try(scopedReaderToken, map[string]string{"source": "erp", "from": "acme", "to": "globex", "payload": "x"})
	if len(tr.Routes) != 3 {
		t.Errorf("scoped: %d verdicts, want erp's 3: %+v", len(tr.Routes), tr.Routes)
	}
	e := b.as(t, scopedReaderToken, http.MethodPost, "/routes/try", map[string]string{"source": "shop", "from": "acme", "to": "globex", "payload": "x"}).
		fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	if !strings.Contains(e.Details.Reason, "shop") {
		t.Errorf("scoped refusal: %+v", e)
	}
	b.as(t, scopedReaderToken, http.MethodPost, "/routes/try", map[string]string{"message_id": shop.ID.String()}).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	for _, token := range []string{ingestToken, receiptToken, scopedReceiptToken} {
		b.as(t, token, http.MethodPost, "/routes/try", map[string]string{"message_id": stored.ID.String()}).
			fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	}
	b.unchanged(t, before)
}
