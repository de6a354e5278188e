package httpapi_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

func TestIngestStoresRoutesAndAnswersTheMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)

	r := b.as(t, ingestToken, http.MethodPost, "/messages",
		httpapi.IngestRequest{Source: "erp", From: "acme", To: "globex", Payload: new("hello")})
	var m httpapi.Message
	r.want(t, http.StatusCreated, &m)
	if loc := r.header.Get("Location"); loc != httpapi.Prefix+"/messages/"+m.ID.String() {
		t.Errorf("Location %q", loc)
	}
	sum := sha256.Sum256([]byte("hello"))
	if m.Source != "erp" || m.From != "acme" || m.To != "globex" || m.Stage != lifecycle.StageDispatched ||
		m.Status != lifecycle.StatusInProgress || m.Error != nil || m.PayloadSize != 5 ||
		m.PayloadSHA256 != hex.EncodeToString(sum[:]) || !m.CreatedAt.Equal(start) || !m.UpdatedAt.Equal(start) {
		t.Errorf("message %+v", m)
	}
	if len(m.Deliveries) != 1 {
		t.Fatalf("deliveries %+v", m.Deliveries)
	}
	d := m.Deliveries[0]
	if d.Target != "billing" || d.State != lifecycle.StateQueued || d.Attempts != 0 || d.LastError != nil ||
		d.FinishedAt != nil || d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(start.Add(lifecycle.DispatchBackoff(1))) {
		t.Errorf("delivery %+v", d)
	}

	// The resource reads back the same, and the payload with its type.
	var got httpapi.Message
	b.as(t, readerToken, http.MethodGet, "/messages/"+m.ID.String(), nil).want(t, http.StatusOK, &got)
	if got.ID != m.ID || got.Status != m.Status || len(got.Deliveries) != 1 || got.Deliveries[0].ID != d.ID {
		t.Errorf("read back %+v", got)
	}
	p := b.as(t, readerToken, http.MethodGet, "/messages/"+m.ID.String()+"/payload", nil).want(t, http.StatusOK, nil)
	if string(p.body) != "hello" || p.header.Get("Content-Type") != "text/plain; charset=utf-8" ||
		p.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("payload %q, headers %v", p.body, p.header)
	}

	// Bytes in base64, with their own type; without one, octet-stream.
	raw := []byte{0, 1, 2, 0xff}
	bin := b.ingest(t, ingestToken, httpapi.IngestRequest{PayloadBase64: new(base64.StdEncoding.EncodeToString(raw)),
		ContentType: "application/edifact"})
	p = b.as(t, adminToken, http.MethodGet, "/messages/"+bin.ID.String()+"/payload", nil).want(t, http.StatusOK, nil)
	if string(p.body) != string(raw) || p.header.Get("Content-Type") != "application/edifact" || bin.PayloadSize != 4 {
		t.Errorf("payload %v as %q, size %d", p.body, p.header.Get("Content-Type"), bin.PayloadSize)
	}
	plain := b.ingest(t, ingestToken, httpapi.IngestRequest{PayloadBase64: new("")})
	p = b.as(t, adminToken, http.MethodGet, "/messages/"+plain.ID.String()+"/payload", nil).want(t, http.StatusOK, nil)
	if len(p.body) != 0 || p.header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("empty payload %q as %q", p.body, p.header.Get("Content-Type"))
	}

	// A message no route covers is not_routed, with no deliveries.
	lost := b.ingest(t, ingestToken, httpapi.IngestRequest{Source: "crm", From: "a", To: "b", Payload: new("x")})
	if lost.Status != lifecycle.StatusNotRouted || lost.Deliveries == nil || len(lost.Deliveries) != 0 {
		t.Errorf("unrouted message %+v", lost)
	}
}

func TestIngestIsIdempotentPerSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	req := httpapi.IngestRequest{Source: "erp", From: "acme", To: "globex", Payload: new("order 4711"), IdempotencyKey: "order-4711"}
	first := b.ingest(t, ingestToken, req)
	before := b.counts(t)

	var again httpapi.Message
	r := b.as(t, ingestToken, http.MethodPost, "/messages", req).want(t, http.StatusOK, &again)
	if again.ID != first.ID || r.header.Get("Location") != "" {
		t.Errorf("repeat answered %s, want the held %s", again.ID, first.ID)
	}
	// A repeat that differs is refused, naming the fields.
	differs := req
	differs.Payload, differs.To, differs.CallbackURL = new("something else"), "initech", "https://erp.example/cb"
	e := b.as(t, ingestToken, http.MethodPost, "/messages", differs).fails(t, http.StatusConflict, httpapi.CodeIdempotencyConflict)
	if !slices.Equal(e.Details.Fields, []string{"payload", "to", "callback_url"}) || !strings.Contains(e.Message, "order-4711") {
		t.Errorf("conflict %+v", e)
	}
	// The same bytes in base64 are the same payload.
	same := req
	same.Payload, same.PayloadBase64 = nil, new(base64.StdEncoding.EncodeToString([]byte(*req.Payload)))
	b.as(t, ingestToken, http.MethodPost, "/messages", same).want(t, http.StatusOK, &again)
	if again.ID != first.ID {
		t.Errorf("repeat in base64 answered %s", again.ID)
	}
	b.unchanged(t, before)

	// The same key from another source is another message.
	req.Source = "crm"
	other := b.ingest(t, ingestToken, req)
	if other.ID == first.ID {
		t.Error("another source's key returned erp's message")
	}
}

// TestIngestKeysMustBeText: an idempotency or duplicate key with a
// control character is 400 naming its field, through the API and from a
// source's batch alike, and stores nothing; a key of any UTF-8 text
// without one is kept as sent and repeats.
func TestIngestKeysMustBeText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	before := b.counts(t)
	for _, field := range []string{"idempotency_key", "duplicate_key"} {
		for _, key := range []string{"k\x00", "k\x00zzz", "k\x01", "tab\tkey", "k\x7f"} {
			b.as(t, ingestToken, http.MethodPost, "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex",
				"payload": "hi", field: key}).invalidField(t, field)
		}
	}
	for _, res := range b.w.IngestMany(b.ctx, []commands.NewMessage{
		{Source: "erp", From: "acme", To: "globex", Payload: []byte("a"), IdempotencyKey: "k\x00"},
		{Source: "erp", From: "acme", To: "globex", Payload: []byte("b"), DuplicateKey: "\xff"},
	}) {
		if !errors.Is(res.Err, commands.ErrInvalid) {
			t.Errorf("a batch's message with a bad key: %v", res.Err)
		}
	}
	b.unchanged(t, before)

	req := httpapi.IngestRequest{IdempotencyKey: "k\uFFFDzzz", DuplicateKey: "ü\uFFFD", Payload: new("hi")}
	first := b.ingest(t, ingestToken, req)
	if first.DuplicateKey == nil || *first.DuplicateKey != req.DuplicateKey {
		t.Errorf("duplicate key kept as %v", first.DuplicateKey)
	}
	var again httpapi.Message
	req.Source, req.From, req.To = "erp", "acme", "globex"
	b.as(t, ingestToken, http.MethodPost, "/messages", req).want(t, http.StatusOK, &again)
	if again.ID != first.ID {
		t.Errorf("repeat answered %s, want the held %s", again.ID, first.ID)
	}
}

func TestIngestRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setupWith(t, httpapi.Config{MaxPayload: 1024})
	b.target(t, "billing", nil)
	before := b.counts(t)
	post := func(contentType, body string) *reply {
		return b.send(t, ingestToken, http.MethodPost, "/messages", contentType, []byte(body))
	}
	valid := `{"source":"erp","from":"acme","to":"globex","payload":"hi"}`

	for _, tc := range []struct{ name, body, field string }{
		{"unknown field", `{"source":"erp","from":"acme","to":"globex","payload":"hi","priority":1}`, "priority"},
		{"name in another case", `{"Source":"erp","from":"acme","to":"globex","payload":"hi"}`, "Source"},
		{"no payload", `{"source":"erp","from":"acme","to":"globex"}`, "payload"},
		{"both payloads", `{"source":"erp","from":"acme","to":"globex","payload":"hi","payload_base64":"aGk="}`, "payload"},
		{"bad base64", `{"source":"erp","from":"acme","to":"globex","payload_base64":"not base64!"}`, "payload_base64"},
		{"bad source", `{"source":"ERP","from":"acme","to":"globex","payload":"hi"}`, "source"},
		{"no parties", `{"source":"erp","payload":"hi"}`, "from"},
		{"wrong type", `{"source":"erp","from":"acme","to":"globex","payload":42}`, "payload"},
		{"not an object", `["erp"]`, "body"},
		{"not JSON", `{"source":`, "body"},
		{"empty", ``, "body"},
		{"long key", `{"source":"erp","from":"acme","to":"globex","payload":"hi","idempotency_key":"` + strings.Repeat("k", 256) + `"}`, "idempotency_key"},
		{"headers not strings", `{"source":"erp","from":"acme","to":"globex","payload":"hi","headers":{"x-a":1}}`, "headers.x-a"},
		{"header name", `{"source":"erp","from":"acme","to":"globex","payload":"hi","headers":{"x a":"1"}}`, "headers"},
		{"header value", `{"source":"erp","from":"acme","to":"globex","payload":"hi","headers":{"x-a":"1\r\nx-b: 2"}}`, "headers.x-a"},
		{"header twice", `{"source":"erp","from":"acme","to":"globex","payload":"hi","headers":{"X-A":"1","x-a":"2"}}`, "headers.x-a"},
		{"header repeated", `{"source":"erp","from":"acme","to":"globex","payload":"hi","headers":{"x-a":"1","x-a":"2"}}`, "headers.x-a"},
		{"field repeated", `{"source":"erp","from":"acme","to":"globex","payload":"hi","to":"initech"}`, "to"},
		{"field escaped and repeated", `{"source":"erp","from":"acme","to":"globex","payload":"hi","\u0074o":"initech"}`, "to"},
		{"too many headers", `{"source":"erp","from":"acme","to":"globex","payload":"hi","headers":{` + manyHeaders(65) + `}}`, "headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			post("application/json", tc.body).invalidField(t, tc.field)
		})
	}
	e := post("application/json", `{"source":"erp","from":"","to":"","payload":"hi"}`).invalidField(t, "from")
	if len(e.Details.Errors) != 2 || e.Details.Errors[1].Field != "to" {
		t.Errorf("every wrong field is listed: %+v", e.Details)
	}
	e = post("application/json", `{"source":"ERP","from":"acme","to":"globex"}`).invalidField(t, "payload")
	if len(e.Details.Errors) != 2 || e.Details.Errors[1].Field != "source" {
		t.Errorf("every wrong field is listed: %+v", e.Details)
	}

	e = post("text/plain", valid).fails(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMediaType)
	if e.Details.Value != "text/plain" || len(e.Details.Allowed) != 1 {
		t.Errorf("415 details %+v", e.Details)
	}
	post("", valid).fails(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMediaType)
	b.unchanged(t, before)
	post("application/json; charset=utf-8", valid).want(t, http.StatusCreated, nil)
	before = b.counts(t)

	big := `{"source":"erp","from":"acme","to":"globex","payload":"` + strings.Repeat("x", 1100) + `"}`
	e = post("application/json", big).fails(t, http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge)
	if e.Details.Limit != 1024 {
		t.Errorf("413 details %+v", e.Details)
	}
	// Without a Content-Length the limit holds while reading.
	req, _ := http.NewRequestWithContext(b.ctx, http.MethodPost, b.srv.URL+httpapi.Prefix+"/messages",
		struct{ *strings.Reader }{strings.NewReader(big)})
	req.Header.Set("Authorization", "Bearer "+ingestToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked body over the limit: %d", resp.StatusCode)
	}
	b.unchanged(t, before)
}

func TestIngestThatCannotBeStoredIs503(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	before := b.counts(t)
	_, err := b.db.Exec(b.ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'disk full'; END $$;
		CREATE TRIGGER payloads_full BEFORE INSERT ON payloads FOR EACH ROW EXECUTE FUNCTION refuse()`)
	if err != nil {
		t.Fatal(err)
	}
	r := b.as(t, ingestToken, http.MethodPost, "/messages",
		httpapi.IngestRequest{Source: "erp", From: "acme", To: "globex", Payload: new("hello")})
	e := r.fails(t, http.StatusServiceUnavailable, httpapi.CodeUnavailable)
	if strings.Contains(e.Message, "disk full") {
		t.Errorf("the cause leaked: %q", e.Message)
	}
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1: the client may try again at once", got)
	}
	b.unchanged(t, before)
}

func TestMessageNotFoundAndMalformedIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	missing := uuid.NewString()
	for _, path := range []string{"/messages/" + missing, "/messages/" + missing + "/payload", "/messages/" + missing + "/history"} {
		b.as(t, readerToken, http.MethodGet, path, nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	}
	for _, path := range []string{"/messages/nope", "/messages/12345/payload", "/messages/" + strings.ReplaceAll(missing, "-", "") + "/history"} {
		b.as(t, readerToken, http.MethodGet, path, nil).invalidField(t, "id")
	}
	b.admin(t, http.MethodPost, "/messages/nope/redispatch", nil).invalidField(t, "id")
	b.admin(t, http.MethodPost, "/messages/"+missing+"/deliveries/nope/redeliver", nil).invalidField(t, "delivery_id")
	b.admin(t, http.MethodPost, "/deliveries/nope/receipt", map[string]string{"outcome": "positive"}).invalidField(t, "id")

	// Paths and methods nobody serves answer in the envelope too.
	b.as(t, readerToken, http.MethodGet, "/nothing", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	e := b.admin(t, http.MethodDelete, "/messages/"+missing, nil).fails(t, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed)
	if len(e.Details.Allowed) != 1 || e.Details.Allowed[0] != http.MethodGet {
		t.Errorf("405 details %+v", e.Details)
	}
}

func TestHistoryReadsTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	d := m.Deliveries[0]
	b.clock.Advance(time.Second)
	b.fail(t, d.ID)
	b.clock.Advance(time.Second)
	b.admin(t, http.MethodPost, "/messages/"+m.ID.String()+"/deliveries/"+d.ID.String()+"/redeliver", nil).
		want(t, http.StatusOK, nil)

	var h httpapi.History
	b.as(t, readerToken, http.MethodGet, "/messages/"+m.ID.String()+"/history", nil).want(t, http.StatusOK, &h)
	events, err := journal.Stream(b.ctx, b.db, m.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	wantKinds := []journal.Kind{journal.KindMessageAccepted, journal.KindMessageDispatched, journal.KindDeliveryClaimed,
		journal.KindDeliveryAttempted, journal.KindDeliveryRedelivered}
	if len(h.Items) != len(wantKinds) || len(events) != len(wantKinds) {
		t.Fatalf("history %+v", h.Items)
	}
	for i, item := range h.Items {
		e := events[i]
		if item.Kind != wantKinds[i] || item.Position != e.Position || !item.At.Equal(e.RecordedAt) ||
			item.Actor != e.Actor || item.Text != e.Text() || item.Text == "" {
			t.Errorf("item %d: %+v, event %+v", i, item, e)
		}
		if i > 0 && item.Position <= h.Items[i-1].Position {
			t.Errorf("item %d out of journal order", i)
		}
	}
	if h.Items[0].DeliveryID != nil || h.Items[0].Target != nil || h.Items[0].OldState != nil || h.Items[0].Actor != "source:erp" {
		t.Errorf("a message event: %+v", h.Items[0])
	}
	last := h.Items[4]
	if last.DeliveryID == nil || *last.DeliveryID != d.ID || *last.Target != "billing" ||
		*last.OldState != lifecycle.StateFailed || *last.NewState != lifecycle.StateQueued || last.Actor != "operator:alice" {
		t.Errorf("the redelivery: %+v", last)
	}
}

func TestRedispatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	if m.Status != lifecycle.StatusNotRouted {
		t.Fatalf("status %s", m.Status)
	}
	b.target(t, "billing", nil)
	b.clock.Advance(time.Minute)

	var after httpapi.Message
	b.admin(t, http.MethodPost, "/messages/"+m.ID.String()+"/redispatch", nil).want(t, http.StatusOK, &after)
	if after.Status != lifecycle.StatusInProgress || len(after.Deliveries) != 1 || after.Deliveries[0].Target != "billing" {
		t.Errorf("after redispatch %+v", after)
	}
	// With {} as the body, and again: nothing more to add.
	b.admin(t, http.MethodPost, "/messages/"+m.ID.String()+"/redispatch", "{}").want(t, http.StatusOK, &after)
	if len(after.Deliveries) != 1 {
		t.Errorf("second redispatch %+v", after)
	}
	events, err := journal.Stream(b.ctx, b.db, m.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	if e := events[2]; e.Kind() != journal.KindMessageRedispatched || e.Actor != "operator:alice" {
		t.Errorf("journaled %s by %s", e.Kind(), e.Actor)
	}

	// An accepted message is not redispatchable: 409 with its stage.
	held, _, err := b.w.Accept(b.ctx, newMessage())
	if err != nil {
		t.Fatal(err)
	}
	before := b.counts(t)
	e := b.admin(t, http.MethodPost, "/messages/"+held.ID.String()+"/redispatch", nil).
		fails(t, http.StatusConflict, httpapi.CodeNotRedispatchable)
	if e.Details.Stage != "accepted" || len(e.Details.Allowed) != 1 || e.Details.Allowed[0] != "dispatched" {
		t.Errorf("409 details %+v", e.Details)
	}
	b.admin(t, http.MethodPost, "/messages/"+uuid.NewString()+"/redispatch", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	// A body of an unknown field, or one not sent as JSON, is refused
	// before anything; no body at all needs no content type.
	b.admin(t, http.MethodPost, "/messages/"+m.ID.String()+"/redispatch", `{"force":true}`).invalidField(t, "force")
	b.send(t, adminToken, http.MethodPost, "/messages/"+m.ID.String()+"/redispatch", "text/plain", []byte("{}")).
		fails(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMediaType)
	b.unchanged(t, before)
}

func TestRedeliver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	other := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	d := m.Deliveries[0]
	path := "/messages/" + m.ID.String() + "/deliveries/" + d.ID.String() + "/redeliver"
	before := b.counts(t)

	// Queued: still in hand.
	e := b.admin(t, http.MethodPost, path, nil).fails(t, http.StatusConflict, httpapi.CodeNotRedeliverable)
	if e.Details.State != "queued" || !sameSet(e.Details.Allowed, lifecycle.Strings(lifecycle.RedeliverRule.States())) {
		t.Errorf("409 details %+v", e.Details)
	}
	// A delivery of another message, or none at all.
	b.admin(t, http.MethodPost, "/messages/"+m.ID.String()+"/deliveries/"+other.Deliveries[0].ID.String()+"/redeliver", nil).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodPost, "/messages/"+m.ID.String()+"/deliveries/"+uuid.NewString()+"/redeliver", nil).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.unchanged(t, before)

	b.clock.Advance(time.Second)
	failed := b.fail(t, d.ID)
	if failed.Status != lifecycle.StatusError {
		t.Fatalf("status %s", failed.Status)
	}
	b.clock.Advance(time.Second)
	var after httpapi.Message
	b.admin(t, http.MethodPost, path, nil).want(t, http.StatusOK, &after)
	got := after.Deliveries[0]
	if after.Status != lifecycle.StatusInProgress || got.State != lifecycle.StateQueued || got.Attempts != 1 ||
		got.LastError == nil || got.NextAttemptAt == nil || got.FinishedAt != nil {
		t.Errorf("after redeliver %+v", after)
	}
	events, err := journal.Stream(b.ctx, b.db, m.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	if e := events[len(events)-1]; e.Kind() != journal.KindDeliveryRedelivered || e.Actor != "operator:alice" || e.DeliveryID != d.ID {
		t.Errorf("journaled %s by %s", e.Kind(), e.Actor)
	}
}

func TestReceipt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "partner", map[string]any{"receipt": map[string]string{"timeout": "1h"}})
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	d := m.Deliveries[0]
	c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, d.ID, c.Token, lifecycle.AwaitingAck("202 Accepted", start.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	path := "/deliveries/" + d.ID.String() + "/receipt"

	before := b.counts(t)
	b.admin(t, http.MethodPost, path, map[string]string{"outcome": "maybe"}).invalidField(t, "outcome")
	b.admin(t, http.MethodPost, path, map[string]string{"text": "ok"}).invalidField(t, "outcome")
	b.admin(t, http.MethodPost, path, map[string]string{"outcome": "positive", "mdn": "x"}).invalidField(t, "mdn")
	long := strings.Repeat("x", lifecycle.MaxReceiptTextLength+1)
	if e := b.admin(t, http.MethodPost, path, map[string]string{"outcome": "positive", "text": long}).invalidField(t, "text"); !strings.Contains(e.Details.Problem, "at most 4096 bytes") {
		t.Errorf("the problem of too long a text: %q", e.Details.Problem)
	}
	b.admin(t, http.MethodPost, "/deliveries/"+uuid.NewString()+"/receipt", map[string]string{"outcome": "positive"}).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.unchanged(t, before)

	// The receiver confirms with a token of the receipt role; the answer is
	// the delivery alone.
	var after httpapi.Delivery
	r := b.as(t, receiptToken, http.MethodPost, path, httpapi.ReceiptRequest{Outcome: httpapi.ReceiptPositive, Text: "MDN processed"}).
		want(t, http.StatusOK, &after)
	if after.ID != d.ID || after.State != lifecycle.StateDelivered || after.FinishedAt == nil {
		t.Errorf("after the receipt %+v", after)
	}
	if strings.Contains(string(r.body), m.ID.String()) {
		t.Errorf("the answer names the message: %s", r.body)
	}
	var settled httpapi.Message
	b.as(t, readerToken, http.MethodGet, "/messages/"+m.ID.String(), nil).want(t, http.StatusOK, &settled)
	if settled.Status != lifecycle.StatusDelivered {
		t.Errorf("the message after the receipt: %+v", settled)
	}

	// A receipt of too long a text is refused at the door, not journaled
	// as a refused receipt.
	before = b.counts(t)
	b.admin(t, http.MethodPost, path, map[string]string{"outcome": "negative", "text": long}).invalidField(t, "text")
	b.unchanged(t, before)

	// A second receipt is refused, and the refusal journaled.
	e := b.admin(t, http.MethodPost, path, httpapi.ReceiptRequest{Outcome: httpapi.ReceiptNegative}).
		fails(t, http.StatusConflict, httpapi.CodeReceiptRefused)
	if e.Details.State != "delivered" || len(e.Details.Allowed) != 1 || e.Details.Allowed[0] != "awaiting_ack" {
		t.Errorf("409 details %+v", e.Details)
	}
	events, err := journal.Stream(b.ctx, b.db, m.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	n := len(events)
	if events[n-2].Kind() != journal.KindReceiptReceived || events[n-2].Actor != "operator:partner" ||
		events[n-1].Kind() != journal.KindReceiptRefused || events[n-1].Actor != "operator:alice" {
		t.Errorf("journal ends with %s by %s, %s by %s", events[n-2].Kind(), events[n-2].Actor, events[n-1].Kind(), events[n-1].Actor)
	}
}

// TestExpungedPayloadIsGone: once retention dropped a message's payload,
// the payload answers 410 PAYLOAD_EXPUNGED, redeliver and redispatch are
// refused the same way with the message's status, resend and replay with
// 409 NOT_RESENDABLE and the reason, and the message itself says so, its
// size and digest kept.
func TestExpungedPayloadIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	d := m.Deliveries[0].ID
	c, err := b.w.Claim(b.ctx, d, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, d, c.Token, lifecycle.Delivered("200")); err != nil {
		t.Fatal(err)
	}
	settings := lifecycle.DefaultSettings()
	settings.Retention.PayloadAfter = new(lifecycle.Duration(time.Second))
	if err := b.w.SetSettings(b.ctx, settings, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	if done, err := b.w.ExpungePayload(b.ctx, m.ID); !done || err != nil {
		t.Fatalf("expunge: %v, %v", done, err)
	}
	path := "/messages/" + m.ID.String()
	b.as(t, readerToken, http.MethodGet, path+"/payload", nil).fails(t, http.StatusGone, httpapi.CodePayloadExpunged)
	e := b.admin(t, http.MethodPost, path+"/deliveries/"+d.String()+"/redeliver", nil).fails(t, http.StatusGone, httpapi.CodePayloadExpunged)
	if e.Details.State != string(lifecycle.StatusDelivered) || !strings.Contains(e.Message, "expunged") {
		t.Errorf("redeliver refused with %+v", e)
	}
	b.admin(t, http.MethodPost, path+"/redispatch", nil).fails(t, http.StatusGone, httpapi.CodePayloadExpunged)
	// A resend and a replay are refused as any message that cannot be
	// sent again, with the reason.
	for _, action := range []string{"/resend", "/replay"} {
		e := b.admin(t, http.MethodPost, path+action, nil).fails(t, http.StatusConflict, httpapi.CodeNotResendable)
		if !strings.Contains(e.Details.Reason, "expunged") {
			t.Errorf("%s refused with %+v", action, e)
		}
	}
	var got httpapi.Message
	b.as(t, readerToken, http.MethodGet, path, nil).want(t, http.StatusOK, &got)
	if !got.PayloadExpunged || got.PayloadSize != m.PayloadSize || got.PayloadSHA256 != m.PayloadSHA256 || m.PayloadExpunged {
		t.Errorf("message %+v, before %+v", got, m)
	}
}

// manyHeaders is n headers as the members of a JSON object.
func manyHeaders(n int) string {
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf(`"x-%d":"v"`, i)
	}
	return strings.Join(members, ",")
}

// TestIngestKeepsHeadersLowerCase: a message's headers are kept with names
// lower case and shown on its resource, {} when it has none.
func TestIngestKeepsHeadersLowerCase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{Headers: map[string]string{"X-Tenant": "acme", "x-request-id": "r 1"}})
	var got httpapi.Message
	b.as(t, readerToken, http.MethodGet, "/messages/"+m.ID.String(), nil).want(t, http.StatusOK, &got)
	if want := map[string]string{"x-tenant": "acme", "x-request-id": "r 1"}; !reflect.DeepEqual(got.Headers, want) || !reflect.DeepEqual(m.Headers, want) {
		t.Errorf("headers %v, then %v; want %v", m.Headers, got.Headers, want)
	}
	b.as(t, ingestToken, http.MethodPost, "/messages", httpapi.IngestRequest{Source: "erp", From: "a", To: "b", Payload: new("hi"),
		Headers: map[string]string{"x-a": strings.Repeat("v", 8<<10)}}).invalidField(t, "headers")
	plain := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	if plain.Headers == nil || len(plain.Headers) != 0 {
		t.Errorf("no headers shown as %#v, want {}", plain.Headers)
	}
}
