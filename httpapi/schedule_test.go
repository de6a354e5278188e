package httpapi_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
)

// TestScheduledIngestAndDeliverNow: deliver_at or delay schedules a
// message, bad schedules are refused naming the field, and deliver now
// queues a scheduled message's deliveries, 409 on any other.
func TestScheduledIngestAndDeliverNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	at := start.Add(2 * time.Hour)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{DeliverAt: &at})
	if m.Status != lifecycle.StatusScheduled || m.DeliverAt == nil || !m.DeliverAt.Equal(at) {
		t.Fatalf("scheduled: %s, deliver_at %v", m.Status, m.DeliverAt)
	}
	if d := m.Deliveries[0]; d.State != lifecycle.StateScheduled || d.NextAttemptAt == nil || !d.NextAttemptAt.Equal(at) {
		t.Fatalf("delivery %+v", d)
	}
	delay := lifecycle.Duration(90 * time.Second)
	if d := b.ingest(t, ingestToken, httpapi.IngestRequest{Delay: &delay}); !d.DeliverAt.Equal(start.Add(90 * time.Second)) {
		t.Errorf("delay 90s: deliver_at %v", d.DeliverAt)
	}
	past := start.Add(-time.Hour)
	if now := b.ingest(t, ingestToken, httpapi.IngestRequest{DeliverAt: &past}); now.Status != lifecycle.StatusInProgress || now.DeliverAt != nil {
		t.Errorf("deliver_at in the past: %s, deliver_at %v", now.Status, now.DeliverAt)
	}

	before := b.counts(t)
	post := func(body string) *reply {
		return b.send(t, ingestToken, http.MethodPost, "/messages", "application/json", []byte(body))
	}
	base := `{"source":"erp","from":"acme","to":"globex","payload":"hi",`
	for _, tc := range []struct{ name, body, field string }{
		{"both", base + `"deliver_at":"2026-12-01T09:00:00Z","delay":"1h"}`, "deliver_at"},
		{"too far", base + `"deliver_at":"2027-01-01T09:00:00Z"}`, "deliver_at"},
		{"delay too long", base + `"delay":"721h"}`, "delay"},
		{"negative delay", base + `"delay":"-1s"}`, "delay"},
		{"delay not a duration", base + `"delay":"soon"}`, "delay"},
		{"deliver_at not a time", base + `"deliver_at":"tomorrow"}`, "deliver_at"},
	} {
		t.Run(tc.name, func(t *testing.T) { post(tc.body).invalidField(t, tc.field) })
	}
	b.unchanged(t, before)

	var now httpapi.Message
	b.act(t, "/messages/"+m.ID.String()+"/deliver-now", strconv.Quote(strconv.Itoa(m.Version)), nil).want(t, http.StatusOK, &now)
	if now.Status != lifecycle.StatusInProgress || now.DeliverAt != nil || now.Deliveries[0].State != lifecycle.StateQueued {
		t.Fatalf("delivered now: %s, %s", now.Status, now.Deliveries[0].State)
	}
	e := b.act(t, "/messages/"+m.ID.String()+"/deliver-now", "", nil).fails(t, http.StatusConflict, httpapi.CodeNotScheduled)
	if e.Details.State != "in_progress" || len(e.Details.Allowed) != 1 || e.Details.Allowed[0] != "scheduled" {
		t.Errorf("409 details %+v", e.Details)
	}
	b.act(t, "/messages/00000000-0000-7000-8000-000000000000/deliver-now", "", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)

	// The list finds scheduled messages by their status.
	var list httpapi.MessageList
	b.admin(t, http.MethodGet, "/messages?status=scheduled", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].Status != lifecycle.StatusScheduled {
		t.Errorf("status=scheduled lists %d", len(list.Items))
	}
	dbtest.Audit(t, b.db)
}

// TestListFiltersByTypePartyAndKey: the messages list keeps the exact
// matches of type, from, to and idempotency_key, and refuses bad ones
// naming the parameter.
func TestListFiltersByTypePartyAndKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	invoice := b.ingest(t, ingestToken, httpapi.IngestRequest{Type: "invoice.created", IdempotencyKey: "k-1"})
	other := b.ingest(t, ingestToken, httpapi.IngestRequest{Source: "erp", From: "initech", To: "umbrella", Payload: new("x")})
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"type=invoice.created", []string{invoice.ID.String()}},
		{"type=invoice", nil},
		{"from=initech", []string{other.ID.String()}},
		{"to=globex", []string{invoice.ID.String()}},
		{"idempotency_key=k-1", []string{invoice.ID.String()}},
		{"idempotency_key=k-1&from=initech", nil},
		{"from=" + url.QueryEscape("acme") + "&type=invoice.created", []string{invoice.ID.String()}},
	} {
		var list httpapi.MessageList
		b.admin(t, http.MethodGet, "/messages?"+tc.query, nil).want(t, http.StatusOK, &list)
		var got []string
		for _, m := range list.Items {
			got = append(got, m.ID.String())
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	for _, tc := range []struct{ query, field string }{
		{"type=invoice%20created", "type"},
		{"from=" + strings.Repeat("a", 256), "from"},
		{"to=%01", "to"},
		{"idempotency_key=" + strings.Repeat("k", 256), "idempotency_key"},
	} {
		b.admin(t, http.MethodGet, "/messages?"+tc.query, nil).invalidField(t, tc.field)
	}
}
