package httpapi_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/dbtest"
)

// The providers' examples: the Standard Webhooks specification's test
// vector and GitHub's documented X-Hub-Signature-256.
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = 1614265330
	swBody      = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	ghSecret    = "It's a Secret to Everybody"
	ghBody      = "Hello, World!"
	ghSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

// refusedCounted reads waybill_ingest_refused_total as source/reason.
func refusedCounted(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "waybill_ingest_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["source"]+"/"+labels["reason"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// webhookSource creates a webhook source of the verify and a route from
// it to billing.
func (b *bundle) webhookSource(t *testing.T, name string, config map[string]any) {
	t.Helper()
	b.admin(t, http.MethodPost, "/sources", httpapi.SourceRequest{Name: name, Kind: "webhook", Enabled: true,
		Config: mustJSON(t, config)}).want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: name, From: "*", To: "*", Target: "billing"}).
		want(t, http.StatusCreated, nil)
}

// post sends a webhook request, with no token unless one is given.
func (b *bundle) post(t *testing.T, source, contentType, body string, kv ...string) *reply {
	t.Helper()
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return b.sendHeader(t, "", http.MethodPost, "/sources/"+source+"/webhook", h, []byte(body))
}

// stripeSignature signs as Stripe documents it: t=<time>,v1=<hex of the
// HMAC-SHA256 of "<time>.<body>" under the endpoint's secret as written>.
func stripeSignature(secret string, at time.Time, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", at.Unix(), body)
	return fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(m.Sum(nil)))
}

// TestWebhookSources: for each scheme, a request signed right is stored
// as a message of its source, routed, its body and content type as
// received; a repeat answers 200 with it and stores nothing; a wrong
// secret, a body changed by one byte and a timestamp six minutes old are
// 401 SIGNATURE_INVALID, counted by reason and stored nowhere.
func TestWebhookSources(t *testing.T) {
	t.Parallel()
	b := setupWith(t, httpapi.Config{MaxPayload: 4096})
	b.target(t, "billing", nil)
	b.webhookSource(t, "sw", map[string]any{"verify": map[string]any{"scheme": "standard-webhooks", "secret": swSecret}})
	b.webhookSource(t, "gh", map[string]any{"verify": map[string]any{"scheme": "github", "secret": ghSecret}, "to": "ci"})
	b.webhookSource(t, "stripe", map[string]any{"verify": map[string]any{"scheme": "stripe", "secret": "whsec_stripe"}})
	b.webhookSource(t, "shop", map[string]any{"verify": map[string]any{"scheme": "hmac", "header": "X-Shop-Hmac",
		"encoding": "base64", "secret": "shop-secret", "id_header": "X-Shop-Id"}})

	// The specification's vector is signed at its own time.
	b.clock.Advance(time.Unix(swTimestamp, 0).Sub(b.clock.Now()))
	now := b.clock.Now()
	stripeBody := `{"id":"evt_1","object":"event","type":"invoice.created"}`
	shopMAC := func(secret, body string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(body))
		return base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	swHeaders := func(sig string) []string {
		return []string{"webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", sig}
	}
	for _, tc := range []struct {
		source, contentType, body string
		headers                   []string
		from, to, typ             string
		// The refused: a wrong secret, a byte changed, six minutes old
		// (none where the scheme signs no time).
		wrongSecret, changed, old []string
		changedBody               string
	}{
		{source: "sw", contentType: "application/json", body: swBody, headers: swHeaders(swSignature), from: "sw", to: "*",
			wrongSecret: swHeaders("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF="),
			changed:     swHeaders(swSignature), changedBody: `{"test": 2432232315}`,
			old: []string{"webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp - 360), "webhook-signature", swSignature}},
		{source: "gh", contentType: "text/plain", body: ghBody, from: "gh", to: "ci", typ: "push",
			headers:     []string{"X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "72d3162e", "X-GitHub-Event", "push"},
			wrongSecret: []string{"X-Hub-Signature-256", "sha256=" + strings.Repeat("0", 64), "X-GitHub-Delivery", "72d3162e"},
			changed:     []string{"X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "72d3162e"}, changedBody: "Hello, World?"},
		{source: "stripe", contentType: "application/json; charset=utf-8", body: stripeBody, from: "stripe", to: "*", typ: "invoice.created",
			headers:     []string{"Stripe-Signature", stripeSignature("whsec_stripe", now, stripeBody)},
			wrongSecret: []string{"Stripe-Signature", stripeSignature("whsec_other", now, stripeBody)},
			changed:     []string{"Stripe-Signature", stripeSignature("whsec_stripe", now, stripeBody)},
			changedBody: strings.Replace(stripeBody, "evt_1", "evt_2", 1),
			old:         []string{"Stripe-Signature", stripeSignature("whsec_stripe", now.Add(-6*time.Minute), stripeBody)}},
		{source: "shop", contentType: "", body: `{"order":1}`, from: "shop", to: "*",
			headers:     []string{"X-Shop-Hmac", shopMAC("shop-secret", `{"order":1}`), "X-Shop-Id", "o-1"},
			wrongSecret: []string{"X-Shop-Hmac", shopMAC("other", `{"order":1}`), "X-Shop-Id", "o-1"},
			changed:     []string{"X-Shop-Hmac", shopMAC("shop-secret", `{"order":1}`), "X-Shop-Id", "o-1"}, changedBody: `{"order":2}`},
	} {
		var got httpapi.WebhookReceived
		b.post(t, tc.source, tc.contentType, tc.body, tc.headers...).want(t, http.StatusCreated, &got)
		m := b.message(t, got.MessageID)
		typ := ""
		if m.Type != nil {
			typ = *m.Type
		}
		if m.Source != tc.source || m.From != tc.from || m.To != tc.to || typ != tc.typ || len(m.Deliveries) != 1 ||
			m.Deliveries[0].Target != "billing" {
			t.Errorf("%s: the message %+v", tc.source, m)
		}
		payload := b.admin(t, http.MethodGet, "/messages/"+got.MessageID.String()+"/payload", nil).want(t, http.StatusOK, nil)
		wantType := tc.contentType
		if wantType == "" {
			wantType = "application/octet-stream"
		}
		if string(payload.body) != tc.body || payload.header.Get("Content-Type") != wantType {
			t.Errorf("%s: the payload %q as %s", tc.source, payload.body, payload.header.Get("Content-Type"))
		}

		before := b.counts(t)
		var again httpapi.WebhookReceived
		b.post(t, tc.source, tc.contentType, tc.body, tc.headers...).want(t, http.StatusOK, &again)
		if again.MessageID != got.MessageID {
			t.Errorf("%s: a repeat answered %s, not %s", tc.source, again.MessageID, got.MessageID)
		}
		refused := refusedCounted(t, b.reg)
		for _, r := range []struct {
			headers []string
			body    string
			reason  string
		}{
			{tc.wrongSecret, tc.body, "signature"}, {tc.changed, tc.changedBody, "signature"}, {tc.old, tc.body, "timestamp"},
			{tc.headers[2:], tc.body, "missing_header"},
		} {
			if r.headers == nil {
				continue
			}
			e := b.post(t, tc.source, tc.contentType, r.body, r.headers...).fails(t, http.StatusUnauthorized, httpapi.CodeSignatureInvalid)
			if e.Message != "the request's signature does not verify" || e.Details.Reason != "" {
				t.Errorf("%s: the refusal says %+v", tc.source, e)
			}
			refused[tc.source+"/"+r.reason]++
		}
		b.unchanged(t, before)
		if got := refusedCounted(t, b.reg); fmt.Sprint(got) != fmt.Sprint(refused) {
			t.Errorf("%s: refused %v, want %v", tc.source, got, refused)
		}
	}
	dbtest.Audit(t, b.db)
}

// TestWebhookRouteTakesNoToken: the route is served without a token, and
// a token does not stand in for a signature; a source that is unknown,
// disabled or of another kind is one 404; the body limit holds first; the
// source's name and keys stay its own.
func TestWebhookRouteTakesNoToken(t *testing.T) {
	t.Parallel()
	b := setupWith(t, httpapi.Config{MaxPayload: 1024})
	b.target(t, "billing", nil)
	b.webhookSource(t, "gh", map[string]any{"verify": map[string]any{"scheme": "github", "secret": ghSecret}})
	b.webhookSource(t, "off", map[string]any{"verify": map[string]any{"scheme": "github", "secret": ghSecret}})
	b.admin(t, http.MethodPut, "/sources/off", map[string]any{"kind": "webhook", "enabled": false,
		"config": map[string]any{"verify": map[string]any{"scheme": "github", "secret": ghSecret}}}).want(t, http.StatusOK, nil)
	b.admin(t, http.MethodPost, "/sources", httpapi.SourceRequest{Name: "drop", Kind: "directory", Enabled: false,
		Config: mustJSON(t, map[string]any{"dir": "/nonexistent", "from": "a", "to": "b"})}).want(t, http.StatusCreated, nil)
	signed := []string{"X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "d-1"}
	before := b.counts(t)

	// A token, even an admin's, is no signature; and no answer asks for one.
	h := http.Header{"Authorization": {"Bearer " + adminToken}, "Cookie": {"waybill_session=x"}}
	r := b.sendHeader(t, "", http.MethodPost, "/sources/gh/webhook", h, []byte(ghBody))
	r.fails(t, http.StatusUnauthorized, httpapi.CodeSignatureInvalid)
	if r.header.Get("WWW-Authenticate") != "" {
		t.Errorf("a webhook's refusal asks for a bearer token")
	}
	var bodies []string
	for _, name := range []string{"nobody", "off", "drop"} {
		e := b.post(t, name, "text/plain", ghBody, signed...).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
		bodies = append(bodies, strings.ReplaceAll(e.Message, name, "NAME"))
	}
	if bodies[0] != bodies[1] || bodies[1] != bodies[2] {
		t.Errorf("the 404s tell the sources apart: %q", bodies)
	}
	b.post(t, "gh", "text/plain", strings.Repeat("x", 1025), signed...).fails(t, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge)
	b.post(t, "nobody", "text/plain", strings.Repeat("x", 1025), signed...).fails(t, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge)
	b.unchanged(t, before)

	// The webhook's name and keys are its own.
	b.as(t, ingestToken, http.MethodPost, "/messages", httpapi.IngestRequest{Source: "gh", From: "a", To: "b", Payload: new("x")}).
		fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	b.as(t, ingestToken, http.MethodPost, "/messages", httpapi.IngestRequest{Source: "erp", From: "a", To: "b", Payload: new("x"),
		IdempotencyKey: "webhook:d-1"}).invalidField(t, "idempotency_key")
	b.unchanged(t, before)

	// Its secret is an admin's to read.
	var src httpapi.Source
	b.as(t, readerToken, http.MethodGet, "/sources/gh", nil).want(t, http.StatusOK, &src)
	if strings.Contains(string(src.Config), "Secret") || !strings.Contains(string(src.Config), `"***"`) {
		t.Errorf("a reader reads %s", src.Config)
	}
	b.admin(t, http.MethodGet, "/sources/gh", nil).want(t, http.StatusOK, &src)
	if !strings.Contains(string(src.Config), "It's a Secret to Everybody") {
		t.Errorf("an admin reads %s", src.Config)
	}
	var page httpapi.JournalPage
	b.as(t, readerToken, http.MethodGet, "/journal", nil).want(t, http.StatusOK, &page)
	for _, e := range page.Items {
		if strings.Contains(string(e.Payload), "Secret to") {
			t.Errorf("the journal shows a reader %s", e.Payload)
		}
	}
	var first, again httpapi.WebhookReceived
	b.post(t, "gh", "text/plain", ghBody, signed...).want(t, http.StatusCreated, &first)
	// A query the provider's URL carries is not read: the same webhook
	// with one is the repeat it is.
	h = http.Header{"Content-Type": {"text/plain"}}
	for i := 0; i < len(signed); i += 2 {
		h.Set(signed[i], signed[i+1])
	}
	b.sendHeader(t, "", http.MethodPost, "/sources/gh/webhook?tenant=acme&tenant=x", h, []byte(ghBody)).want(t, http.StatusOK, &again)
	if again.MessageID != first.MessageID {
		t.Errorf("the webhook with a query answered %s, not %s", again.MessageID, first.MessageID)
	}
}

// TestWebhookSourceHeaders: a webhook source keeps the request headers its
// config names as the message's headers, which a route's filter reads, and
// its type where the scheme names none; a header the message cannot hold
// refuses the request with 400 and stores nothing; a pattern of a reserved
// header or a credential is refused when the source is saved.
func TestWebhookSourceHeaders(t *testing.T) {
	t.Parallel()
	b := setupWith(t, httpapi.Config{MaxPayload: 4096})
	b.target(t, "billing", nil)
	b.admin(t, http.MethodPost, "/sources", httpapi.SourceRequest{Name: "shop", Kind: "webhook", Enabled: true,
		Config: mustJSON(t, map[string]any{"verify": map[string]any{"scheme": "hmac", "header": "X-Sig", "secret": "s"},
			"headers": []string{"Authorization"}})}).invalidField(t, "config.headers[0]")
	b.admin(t, http.MethodPost, "/sources", httpapi.SourceRequest{Name: "shop", Kind: "webhook", Enabled: true,
		Config: mustJSON(t, map[string]any{"verify": map[string]any{"scheme": "hmac", "header": "X-Sig", "secret": "s"},
			"headers": []string{"X-Tenant", "x-request-*"}, "type": "shop.order"})}).want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "shop", From: "*", To: "*", Target: "billing",
		Types: []string{"shop.*"}, Filter: `message.headers[?"x-tenant"].orValue("") == "acme"`}).want(t, http.StatusCreated, nil)
	sign := func(body string) string {
		m := hmac.New(sha256.New, []byte("s"))
		m.Write([]byte(body))
		return hex.EncodeToString(m.Sum(nil))
	}
	for _, tc := range []struct {
		tenant  string
		headers map[string]string
		routed  bool
	}{
		{"acme", map[string]string{"x-tenant": "acme", "x-request-id": "r1"}, true},
		{"globex", map[string]string{"x-tenant": "globex", "x-request-id": "r1"}, false},
	} {
		body := `{"tenant":"` + tc.tenant + `"}`
		var got httpapi.WebhookReceived
		b.post(t, "shop", "application/json", body, "X-Sig", sign(body), "X-Tenant", tc.tenant, "X-Request-Id", "r1",
			"X-Other", "o", "Authorization", "Bearer t").want(t, http.StatusCreated, &got)
		m := b.message(t, got.MessageID)
		if fmt.Sprint(m.Headers) != fmt.Sprint(tc.headers) || m.Type == nil || *m.Type != "shop.order" ||
			(len(m.Deliveries) == 1) != tc.routed {
			t.Errorf("%s: the message %+v", tc.tenant, m)
		}
	}
	before := b.counts(t)
	body := `{"tenant":"?"}`
	b.post(t, "shop", "application/json", body, "X-Sig", sign(body), "X-Tenant", "\xff").invalidField(t, "headers.x-tenant")
	b.unchanged(t, before)
}
