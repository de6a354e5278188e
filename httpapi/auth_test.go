package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

func TestEveryCallNeedsAKnownToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	for _, rt := range httpapi.Routes() {
		if rt.Permission == "none" {
			continue // a webhook, signed instead (webhook_test.go)
		}
		path := strings.NewReplacer("{id}", uuid.NewString(), "{delivery_id}", uuid.NewString(), "{name}", "billing").Replace(rt.Path)
		for _, header := range []string{"", "Bearer", "Bearer nope", "Basic " + adminToken, adminToken} {
			req, _ := http.NewRequestWithContext(b.ctx, rt.Method, b.srv.URL+httpapi.Prefix+path, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s with %q: %d", rt.Method, path, header, resp.StatusCode)
			}
		}
	}
	b.send(t, "", http.MethodGet, "/messages", "", nil).fails(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
	b.send(t, "wrong", http.MethodGet, "/nowhere", "", nil).fails(t, http.StatusUnauthorized, httpapi.CodeUnauthorized)
	b.unchanged(t, before)
}

func TestRolesBoundWhatATokenMayDo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", map[string]any{"receipt": map[string]string{"timeout": "1h"}})
	m := b.ingest(t, adminToken, httpapi.IngestRequest{})
	d := m.Deliveries[0].ID.String()
	// The delivery awaits its receipt, so the receipt token's call succeeds.
	c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, m.Deliveries[0].ID, c.Token, lifecycle.AwaitingAck("202 Accepted", start.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	ingest := `{"source":"erp","from":"acme","to":"globex","payload":"hi"}`
	route := `{"source":"erp","from":"*","to":"*","target":"billing"}`

	type call struct{ method, path, body string }
	reads := []call{{"GET", "/messages", ""}, {"GET", "/messages/" + m.ID.String(), ""},
		{"GET", "/messages/" + m.ID.String() + "/payload", ""}, {"GET", "/messages/" + m.ID.String() + "/history", ""},
		{"GET", "/routes", ""}, {"GET", "/targets", ""}, {"GET", "/targets/billing", ""}, {"GET", "/settings", ""},
		{"GET", "/stats", ""}, {"GET", "/journal", ""}, {"GET", "/openapi.json", ""}}
	posts := []call{{"POST", "/messages", ingest}}
	receipts := []call{{"POST", "/deliveries/" + d + "/receipt", `{"outcome":"positive"}`}}
	admin := []call{{"POST", "/messages/" + m.ID.String() + "/redispatch", ""},
		{"POST", "/messages/" + m.ID.String() + "/deliveries/" + d + "/redeliver", ""},
		{"POST", "/routes", route}, {"PUT", "/targets/billing", `{"kind":"file","config":{"dir":"/tmp"}}`},
		{"DELETE", "/targets/billing", ""}, {"PUT", "/settings", `{"delivery":{"max_dispatches":3}}`}}

	for _, tc := range []struct {
		token   string
		allowed [][]call
		refused [][]call
		role    string
	}{
		{readerToken, [][]call{reads}, [][]call{posts, receipts, admin}, "reader"},
		{ingestToken, [][]call{posts}, [][]call{reads, receipts, admin}, "ingest"},
		{receiptToken, [][]call{receipts}, [][]call{reads, posts, admin}, "receipt"},
	} {
		for _, calls := range tc.refused {
			for _, c := range calls {
				before := b.counts(t)
				e := b.send(t, tc.token, c.method, c.path, "application/json", []byte(c.body)).
					fails(t, http.StatusForbidden, httpapi.CodeForbidden)
				if e.Details.Role != tc.role || e.Details.Needs == "" {
					t.Errorf("%s %s as %s: details %+v", c.method, c.path, tc.role, e.Details)
				}
				b.unchanged(t, before)
			}
		}
		for _, calls := range tc.allowed {
			for _, c := range calls {
				if r := b.send(t, tc.token, c.method, c.path, "application/json", []byte(c.body)); r.status >= 300 {
					t.Errorf("%s %s as %s: %d %s", c.method, c.path, tc.role, r.status, r.body)
				}
			}
		}
	}
	// The admin may do all of it; the answers are the operations' own (a
	// 409 for a delivery that is not redeliverable, say), never 403.
	for _, calls := range [][]call{reads, posts, receipts, admin} {
		for _, c := range calls {
			if r := b.send(t, adminToken, c.method, c.path, "application/json", []byte(c.body)); r.status == http.StatusForbidden || r.status == http.StatusUnauthorized {
				t.Errorf("%s %s as admin: %d %s", c.method, c.path, r.status, r.body)
			}
		}
	}
}

// TestHeadNeedsWhatGetNeeds: a HEAD of any route is answered as its GET,
// whatever the token: a reader's HEAD /tokens is 403 as its GET is, so
// the answer's length does not tell the size of the tokens' list.
func TestHeadNeedsWhatGetNeeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.admin(t, http.MethodPost, "/tokens", map[string]string{"name": "feed", "role": "ingest"}).want(t, http.StatusCreated, nil)
	b.as(t, readerToken, http.MethodHead, "/tokens", nil).want(t, http.StatusForbidden, nil)
	for _, rt := range httpapi.Routes() {
		if rt.Method != http.MethodGet {
			continue
		}
		path := strings.NewReplacer("{id}", uuid.NewString(), "{name}", "billing").Replace(rt.Path)
		for _, token := range []string{adminToken, readerToken, ingestToken, receiptToken, scopedReaderToken} {
			get := b.as(t, token, http.MethodGet, path, nil)
			head := b.as(t, token, http.MethodHead, path, nil)
			if head.status != get.status || len(head.body) != 0 {
				t.Errorf("HEAD %s with %s: %d and %d bytes, GET: %d", path, token, head.status, len(head.body), get.status)
			}
		}
	}
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.as(t, readerToken, http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK, nil)
	if !bytes.Equal(r.body, httpapi.OpenAPI) || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("served %d bytes as %q", len(r.body), r.header.Get("Content-Type"))
	}
}

func TestMetricsByRoutePatternAndCode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.as(t, readerToken, http.MethodGet, "/messages", nil).want(t, http.StatusOK, nil)
	b.as(t, readerToken, http.MethodGet, "/messages", nil).want(t, http.StatusOK, nil)
	id := uuid.NewString()
	b.as(t, readerToken, http.MethodGet, "/messages/"+id, nil).want(t, http.StatusNotFound, nil)
	b.as(t, readerToken, http.MethodGet, "/nothing/here", nil).want(t, http.StatusNotFound, nil)
	b.as(t, "", http.MethodGet, "/stats", nil).want(t, http.StatusUnauthorized, nil)

	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "waybill_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			counts[labels["route"]+" "+labels["code"]] = m.GetHistogram().GetSampleCount()
		}
	}
	for key, n := range map[string]uint64{
		"GET /api/v1/messages 200":      2,
		"GET /api/v1/messages/{id} 404": 1,
		"unmatched 404":                 1,
		"GET /api/v1/stats 401":         1,
	} {
		if counts[key] != n {
			t.Errorf("%s: %d requests, want %d (all: %v)", key, counts[key], n, counts)
		}
	}
	if len(counts) != 4 {
		t.Errorf("series %v, want 4", counts)
	}
}
