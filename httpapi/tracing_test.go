package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestIngestKeepsTheSendersTraceWithTracingOff: with tracing off an
// ingest makes no span, and the message keeps the trace context its
// request brought, so that it joins the sender's trace once tracing is
// on; a traceparent that does not parse is dropped with what came with it.
func TestIngestKeepsTheSendersTraceWithTracingOff(t *testing.T) {
	b := setup(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		name   string
		header map[string]string
		want   lifecycle.Trace
	}{
		{"all three", map[string]string{"Traceparent": parent, "Tracestate": "vendor=x", "Baggage": "tenant=acme"},
			lifecycle.Trace{Parent: parent, State: "vendor=x", Baggage: "tenant=acme"}},
		{"none", nil, lifecycle.Trace{}},
		{"a bad traceparent", map[string]string{"Traceparent": "00-zz-00f067aa0ba902b7-01", "Tracestate": "vendor=x"}, lifecycle.Trace{}},
		{"baggage alone", map[string]string{"Baggage": "tenant=acme"}, lifecycle.Trace{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {"application/json"}}
			for k, v := range c.header {
				h.Set(k, v)
			}
			var m httpapi.Message
			b.sendHeader(t, adminToken, "POST", "/messages", h,
				[]byte(`{"source":"erp","from":"acme","to":"globex","payload":"x"}`)).want(t, http.StatusCreated, &m)
			stored, err := projection.Load(b.ctx, b.db, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			if stored.Trace != c.want {
				t.Errorf("kept %+v; want %+v", stored.Trace, c.want)
			}
		})
	}
}
