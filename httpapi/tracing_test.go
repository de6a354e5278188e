package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
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

// TestMessageShowsItsTraceNotItsBaggage: the message resource shows the
// trace context it keeps, without its baggage, which the journal shows
// masked to a reader and whole to an admin; a message without a trace
// shows null.
func TestMessageShowsItsTraceNotItsBaggage(t *testing.T) {
	b := setup(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := http.Header{"Content-Type": {"application/json"}, "Traceparent": {parent}, "Baggage": {"session=s3cret"}}
	var m httpapi.Message
	b.sendHeader(t, adminToken, "POST", "/messages", h,
		[]byte(`{"source":"erp","from":"acme","to":"globex","payload":"x"}`)).want(t, http.StatusCreated, &m)
	b.as(t, readerToken, http.MethodGet, "/messages/"+m.ID.String(), nil).want(t, http.StatusOK, &m)
	if m.Trace == nil || m.Trace.Traceparent != parent || m.Trace.Tracestate != nil {
		t.Errorf("trace %+v; want %s and no tracestate", m.Trace, parent)
	}
	for token, want := range map[string]string{readerToken: `"baggage":"***"`, adminToken: `"baggage":"session=s3cret"`} {
		var page httpapi.JournalPage
		b.as(t, token, http.MethodGet, "/journal?limit=500", nil).want(t, http.StatusOK, &page)
		found := false
		for _, e := range page.Items {
			if e.Stream == m.ID.String() && e.Kind == journal.KindMessageAccepted {
				found = true
				if !strings.Contains(string(e.Payload), want) {
					t.Errorf("%s reads %s; want %s", token, e.Payload, want)
				}
			}
		}
		if !found {
			t.Errorf("%s found no message.accepted of the message", token)
		}
	}

	var plain httpapi.Message
	b.as(t, adminToken, "POST", "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex", "payload": "y"}).
		want(t, http.StatusCreated, &plain)
	if plain.Trace != nil {
		t.Errorf("a message without a trace shows %+v", plain.Trace)
	}
}
