package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// receiptsCounted reads waybill_receipts_total by result.
func receiptsCounted(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "waybill_receipts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestReceiptsByReceiversID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "sms", nil)
	if got := receiptsCounted(t, b.reg); len(got) != 5 || got["settled"] != 0 {
		t.Fatalf("waybill_receipts_total from the start: %v", got)
	}
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	d := m.Deliveries[0]
	c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o := lifecycle.AwaitingAck("202 Accepted", start.Add(time.Hour))
	o.ExternalID = "SM-1"
	if _, err := b.w.Complete(b.ctx, d.ID, c.Token, o); err != nil {
		t.Fatal(err)
	}

	post := func(token string, body any) *reply { return b.as(t, token, http.MethodPost, "/receipts", body) }
	post(readerToken, map[string]any{"target": "sms", "external_id": "SM-1"}).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1"}).invalidField(t, "outcome")
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1", "outcome": "maybe"}).invalidField(t, "outcome")
	post(receiptToken, map[string]any{"target": "sms", "external_id": strings.Repeat("x", 256), "outcome": "positive"}).
		invalidField(t, "external_id")
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1", "outcome": "positive", "delivery_id": "x"}).
		invalidField(t, "delivery_id")
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-9", "outcome": "positive"}).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	before := b.counts(t)
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1", "outcome": "negative",
		"text": strings.Repeat("x", lifecycle.MaxReceiptTextLength+1)}).invalidField(t, "text")
	b.unchanged(t, before)

	var got httpapi.Delivery
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1", "final": false, "status": "ENROUTE"}).
		want(t, http.StatusOK, &got)
	if got.ID != d.ID || got.State != lifecycle.StateAwaitingAck {
		t.Fatalf("after an intermediate receipt: %+v", got)
	}
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1", "outcome": "positive", "status": "DELIVRD",
		"code": "000", "text": "handset"}).want(t, http.StatusOK, &got)
	if got.State != lifecycle.StateDelivered || got.FinishedAt == nil {
		t.Fatalf("after the final receipt: %+v", got)
	}
	post(receiptToken, map[string]any{"target": "sms", "external_id": "SM-1", "outcome": "negative"}).
		fails(t, http.StatusConflict, httpapi.CodeCorrelationConsumed)

	var history httpapi.History
	b.admin(t, http.MethodGet, "/messages/"+m.ID.String()+"/history", nil).want(t, http.StatusOK, &history)
	last := history.Items[len(history.Items)-1]
	if last.Kind != "delivery.receipt_received" || last.Actor != "operator:partner" ||
		last.Text != "positive receipt (id SM-1, status DELIVRD, code 000): handset" {
		t.Errorf("history ends with %+v", last)
	}
	want := map[string]float64{"settled": 1, "intermediate": 1, "unknown": 1, "consumed": 1, "refused": 0}
	for k, v := range receiptsCounted(t, b.reg) {
		if want[k] != v {
			t.Errorf("waybill_receipts_total{result=%q} = %v, want %v", k, v, want[k])
		}
	}
}
