package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// TestPolledSourcesTakeNoRESTIngest: a source Waybill polls takes no
// message over REST, whoever posts it, and no sender can take the keys a
// polling source uses; so the inbox's row 4 is stored and delivered.
func TestPolledSourcesTakeNoRESTIngest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "up", From: "*", To: "*", Target: "billing"}).
		want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "up", "kind": "inbox_table",
		"config": map[string]any{"database_url": "postgres://waybill@127.0.0.1:1/inbox", "table": "inbox", "id_column": "id",
			"payload_column": "body", "from_column": "sender", "to_column": "receiver", "processed_column": "done_at"}}).
		want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodPost, "/sources", map[string]any{"name": "drop", "kind": "directory",
		"config": map[string]any{"dir": "/var/spool/in", "from": "erp", "to": "billing"}}).want(t, http.StatusCreated, nil)

	before := b.counts(t)
	for _, c := range []struct{ token, source, kind string }{
		{ingestToken, "up", "inbox_table"}, {adminToken, "up", "inbox_table"}, {ingestToken, "drop", "directory"},
	} {
		e := b.as(t, c.token, http.MethodPost, "/messages", map[string]any{"source": c.source, "from": "acme", "to": "globex",
			"payload": "taken", "idempotency_key": "row:4"}).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
		if !strings.Contains(e.Details.Reason, c.kind) || !strings.Contains(e.Details.Reason, c.source) {
			t.Errorf("post to %s: reason %q does not name the source and its kind %s", c.source, e.Details.Reason, c.kind)
		}
	}
	// Under any other source name the polling sources' keys are refused
	// too, so a source made later finds none of its keys taken.
	for _, key := range []string{"row:4", "file:0123abcd"} {
		b.as(t, ingestToken, http.MethodPost, "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex",
			"payload": "taken", "idempotency_key": key}).invalidField(t, "idempotency_key")
	}
	b.unchanged(t, before)
	b.ingest(t, ingestToken, httpapi.IngestRequest{IdempotencyKey: "rows:4"})

	// The inbox's row 4, as the poller hands it in: new, and delivered.
	m, created, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "up", From: "acme", To: "globex", ContentType: "text/plain",
		Payload: []byte("the real row 4"), IdempotencyKey: "row:4"})
	if err != nil || !created {
		t.Fatalf("row 4: created %v, %v", created, err)
	}
	if len(m.Deliveries) != 1 || m.Deliveries[0].Target != "billing" {
		t.Fatalf("row 4's deliveries: %+v", m.Deliveries)
	}
}

// TestScopedIngestToken posts only to its sources.
func TestScopedIngestToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, source := range []string{"erp", "crm"} {
		b.ingest(t, scopedIngestToken, httpapi.IngestRequest{Source: source, From: "acme", To: "globex"})
	}
	before := b.counts(t)
	e := b.as(t, scopedIngestToken, http.MethodPost, "/messages", map[string]any{"source": "wms", "from": "acme", "to": "globex",
		"payload": "elsewhere"}).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	if e.Details.Role != "ingest" || e.Details.Needs != "ingest" || !strings.Contains(e.Details.Reason, "erp, crm") {
		t.Errorf("details %+v", e.Details)
	}
	b.unchanged(t, before)
	// The unscoped ingest token keeps its reach.
	b.ingest(t, ingestToken, httpapi.IngestRequest{Source: "wms", From: "acme", To: "globex"})
}

// TestScopedReaderToken reads its sources' messages and nothing else: the
// list is bound to them, another source's message is not found, and every
// other read is refused.
func TestScopedReaderToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mine := b.ingest(t, adminToken, httpapi.IngestRequest{Source: "erp", From: "acme", To: "globex"})
	other := b.ingest(t, adminToken, httpapi.IngestRequest{Source: "wms", From: "acme", To: "globex"})

	var list httpapi.MessageList
	b.as(t, scopedReaderToken, http.MethodGet, "/messages", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].ID != mine.ID {
		t.Fatalf("listed %+v, want erp's message only", list.Items)
	}
	b.as(t, scopedReaderToken, http.MethodGet, "/messages?source=erp", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 1 {
		t.Fatalf("listed %d of erp", len(list.Items))
	}
	e := b.as(t, scopedReaderToken, http.MethodGet, "/messages?source=wms", nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	if !strings.Contains(e.Details.Reason, "erp") {
		t.Errorf("reason %q", e.Details.Reason)
	}
	for _, suffix := range []string{"", "/payload", "/history"} {
		if r := b.as(t, scopedReaderToken, http.MethodGet, "/messages/"+mine.ID.String()+suffix, nil); r.status != http.StatusOK {
			t.Errorf("GET erp's message%s: %d %s", suffix, r.status, r.body)
		}
		b.as(t, scopedReaderToken, http.MethodGet, "/messages/"+other.ID.String()+suffix, nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	for _, path := range []string{"/targets", "/routes", "/sources", "/settings", "/journal", "/stats", "/operations", "/targets/billing/lanes"} {
		e := b.as(t, scopedReaderToken, http.MethodGet, path, nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
		if e.Details.Role != "reader" || !strings.Contains(e.Details.Reason, "scoped to the sources erp") {
			t.Errorf("GET %s: details %+v", path, e.Details)
		}
	}
	b.as(t, scopedReaderToken, http.MethodGet, "/openapi.json", nil).want(t, http.StatusOK, nil)
	// The unscoped reader keeps its reach.
	b.as(t, readerToken, http.MethodGet, "/messages/"+other.ID.String(), nil).want(t, http.StatusOK, nil)
	b.as(t, readerToken, http.MethodGet, "/journal", nil).want(t, http.StatusOK, nil)
}

// TestScopedReceiptToken settles its targets' deliveries only, by
// delivery and by the receiver's id.
func TestScopedReceiptToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	receipt := map[string]any{"receipt": map[string]string{"timeout": "1h"}}
	b.target(t, "billing", receipt)
	b.target(t, "ledger", receipt)
	m := b.ingest(t, adminToken, httpapi.IngestRequest{})
	deliveries := map[string]string{}
	for _, d := range m.Deliveries {
		c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.w.Complete(b.ctx, d.ID, c.Token, lifecycle.AwaitingAck("202 Accepted", start.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		deliveries[d.Target] = d.ID.String()
	}
	before := b.counts(t)
	e := b.as(t, scopedReceiptToken, http.MethodPost, "/deliveries/"+deliveries["ledger"]+"/receipt",
		httpapi.ReceiptRequest{Outcome: httpapi.ReceiptPositive}).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	// The refusal names the token's targets, not the delivery's, which
	// the token has no business knowing.
	if e.Details.Needs != "confirm" || !strings.Contains(e.Details.Reason, "billing") || strings.Contains(e.Details.Reason, "ledger") {
		t.Errorf("details %+v", e.Details)
	}
	e = b.as(t, scopedReceiptToken, http.MethodPost, "/receipts", map[string]any{"target": "ledger", "external_id": "x-1",
		"outcome": "positive"}).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	if !strings.Contains(e.Details.Reason, "ledger") {
		t.Errorf("details %+v", e.Details)
	}
	b.unchanged(t, before)
	var d httpapi.Delivery
	b.as(t, scopedReceiptToken, http.MethodPost, "/deliveries/"+deliveries["billing"]+"/receipt",
		httpapi.ReceiptRequest{Outcome: httpapi.ReceiptPositive}).want(t, http.StatusOK, &d)
	if d.State != lifecycle.StateDelivered {
		t.Errorf("billing's delivery %s", d.State)
	}
	// The unscoped receipt token keeps its reach.
	b.as(t, receiptToken, http.MethodPost, "/deliveries/"+deliveries["ledger"]+"/receipt",
		httpapi.ReceiptRequest{Outcome: httpapi.ReceiptPositive}).want(t, http.StatusOK, nil)
}

// TestTokensOverREST: an admin lists, creates and revokes tokens; the
// secret is answered once; the last admin token stays.
func TestTokensOverREST(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var made httpapi.NewToken
	r := b.admin(t, http.MethodPost, "/tokens", httpapi.TokenRequest{Name: "erp-feed", Role: "ingest", Sources: []string{"erp", "crm"},
		Expires: "90d"}).want(t, http.StatusCreated, &made)
	if r.header.Get("Location") != httpapi.Prefix+"/tokens/erp-feed" || made.Token.Name != "erp-feed" ||
		made.Token.ExpiresAt == nil || !made.Token.ExpiresAt.Equal(start.Add(90*24*time.Hour)) || made.Token.LastUsedAt != nil {
		t.Fatalf("made %+v", made)
	}
	id, err := b.tokens.Authenticate(b.ctx, made.Secret)
	if err != nil || id.Role != auth.RoleIngest || id.Scope == nil || strings.Join(id.Scope.Sources, ",") != "erp,crm" {
		t.Fatalf("the secret authenticates as %+v, %v", id, err)
	}
	b.admin(t, http.MethodPost, "/tokens", httpapi.TokenRequest{Name: "partner", Role: "receipt", Targets: []string{"billing"}}).
		want(t, http.StatusCreated, nil)

	var list httpapi.TokenList
	r = b.admin(t, http.MethodGet, "/tokens", nil).want(t, http.StatusOK, &list)
	byName := map[string]httpapi.Token{}
	for _, tk := range list.Items {
		byName[tk.Name] = tk
	}
	if feed, partner := byName["erp-feed"], byName["partner"]; len(list.Items) != 2 || feed.ID != made.Token.ID ||
		feed.LastUsedAt == nil || strings.Join(partner.Targets, ",") != "billing" || partner.Sources != nil || partner.ExpiresAt != nil {
		t.Fatalf("listed %+v", list.Items)
	}
	if strings.Contains(string(r.body), made.Secret[20:]) {
		t.Fatal("the list shows a secret")
	}

	// Bad input names its field and makes nothing.
	for _, c := range []struct {
		req   httpapi.TokenRequest
		field string
	}{
		{httpapi.TokenRequest{Name: "root", Role: "admin", Sources: []string{"erp"}}, "sources"},
		{httpapi.TokenRequest{Name: "desk", Role: "reader", Targets: []string{"billing"}}, "targets"},
		{httpapi.TokenRequest{Name: "desk", Role: "reader", Expires: "soon"}, "expires"},
		{httpapi.TokenRequest{Name: "Desk", Role: "reader"}, "name"},
		{httpapi.TokenRequest{Name: "desk", Role: "root"}, "role"},
	} {
		b.admin(t, http.MethodPost, "/tokens", c.req).invalidField(t, c.field)
	}
	// Only admins manage tokens.
	for _, token := range []string{readerToken, ingestToken, scopedReaderToken} {
		b.as(t, token, http.MethodGet, "/tokens", nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
		b.as(t, token, http.MethodDelete, "/tokens/partner", nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	}
	b.admin(t, http.MethodDelete, "/tokens/erp-feed", nil).want(t, http.StatusNoContent, nil)
	if _, err := b.tokens.Authenticate(b.ctx, made.Secret); err == nil {
		t.Fatal("a revoked token authenticates")
	}
	b.admin(t, http.MethodDelete, "/tokens/erp-feed", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)

	// The store's only admin token stays.
	b.admin(t, http.MethodPost, "/tokens", httpapi.TokenRequest{Name: "ops", Role: "admin"}).want(t, http.StatusCreated, nil)
	b.admin(t, http.MethodDelete, "/tokens/ops", nil).fails(t, http.StatusConflict, httpapi.CodeLastAdminToken)
	b.admin(t, http.MethodGet, "/tokens", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 2 {
		t.Fatalf("%d tokens left, want partner and ops", len(list.Items))
	}
}
