package targets

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// correlating is an http target to url awaiting a receipt, its id for the
// message where c says.
func correlating(t *testing.T, url string, c lifecycle.Correlation) Deliverer {
	t.Helper()
	spec := target("http", httpConfigFor(url, ""))
	spec.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Hour), Correlate: &c}
	prepared, err := Prepare(spec)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(prepared, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHTTPTakesTheReceiversID from a header or a JSON pointer into the
// body of a 2xx answer; an answer without a usable id is delivered all the
// same, its text saying so.
func TestHTTPTakesTheReceiversID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		c       lifecycle.Correlation
		respond http.HandlerFunc
		id      string
	}{
		{"header", lifecycle.Correlation{Header: "X-Message-Id"}, status(http.StatusAccepted, "ok", "X-Message-Id", "SM-17"), "SM-17"},
		{"string", lifecycle.Correlation{JSON: "/data/0/id"}, status(http.StatusOK, `{"data":[{"id":"SM-9"}]}`), "SM-9"},
		{"number", lifecycle.Correlation{JSON: "/id"}, status(http.StatusOK, `{"id": 12345678901234567890}`), "12345678901234567890"},
		{"escaped", lifecycle.Correlation{JSON: "/a~1b/c~0d"}, status(http.StatusOK, `{"a/b":{"c~d":"E"}}`), "E"},
		{"no header", lifecycle.Correlation{Header: "X-Message-Id"}, status(http.StatusOK, ""), ""},
		{"not json", lifecycle.Correlation{JSON: "/id"}, status(http.StatusOK, "id=1"), ""},
		{"an object", lifecycle.Correlation{JSON: "/id"}, status(http.StatusOK, `{"id":{}}`), ""},
		{"past the array", lifecycle.Correlation{JSON: "/0/1"}, status(http.StatusOK, `[["x"]]`), ""},
		{"too long", lifecycle.Correlation{Header: "X-Id"}, status(http.StatusOK, "", "X-Id", strings.Repeat("x", 256)), ""},
	} {
		srv := newRecorder(t, tc.respond)
		out := correlating(t, srv.URL, tc.c).Deliver(t.Context(), attempt(1, "x"))
		if out.Kind != lifecycle.OutcomeDelivered || out.ExternalID != tc.id {
			t.Errorf("%s: outcome %+v, want id %q", tc.name, out, tc.id)
		}
		if missing := strings.Contains(out.Text, "no usable id"); missing != (tc.id == "") {
			t.Errorf("%s: text %q", tc.name, out.Text)
		}
	}
	// A failure takes no id.
	srv := newRecorder(t, status(http.StatusServiceUnavailable, "", "X-Message-Id", "SM-1"))
	if out := correlating(t, srv.URL, lifecycle.Correlation{Header: "X-Message-Id"}).Deliver(t.Context(), attempt(1, "x")); out.ExternalID != "" {
		t.Errorf("a retry took the id %q", out.ExternalID)
	}
}

func TestCorrelationIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c     string
		kind  string
		field string
	}{
		{`{}`, "http", "receipt.correlate"},
		{`{"header": "X-Id", "json": "/id"}`, "http", "receipt.correlate"},
		{`{"header": "X Id"}`, "http", "receipt.correlate.header"},
		{`{"json": "id"}`, "http", "receipt.correlate.json"},
		{`{"json": "/a~2"}`, "http", "receipt.correlate.json"},
		{`{"json": "/id"}`, "file", "receipt.correlate"},
	} {
		config := httpConfigFor("http://127.0.0.1:9/", "")
		if tc.kind == "file" {
			config = `{"dir":"/tmp"}`
		}
		spec := target(tc.kind, config)
		var c lifecycle.Correlation
		if err := json.Unmarshal([]byte(tc.c), &c); err != nil {
			t.Fatal(err)
		}
		spec.Receipt = &lifecycle.ReceiptPolicy{Timeout: lifecycle.Duration(time.Hour), Correlate: &c}
		_, err := Prepare(spec)
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s %s: %v, want a problem of %s", tc.kind, tc.c, err, tc.field)
		}
	}
}
