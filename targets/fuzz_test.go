package targets

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/waybill/waybill/lifecycle"
)

// FuzzHTTPAnswer reads a receiver's answer, which Waybill does not
// control, as an http target does: its outcome (status, Retry-After,
// Location, the start of the body) and the receiver's id for the message
// (in a header or at a JSON pointer into the body).
func FuzzHTTPAnswer(f *testing.F) {
	f.Add(200, "", "", []byte(`{"id":"INV-2026-0042"}`), "/id", "")
	f.Add(202, "", "", []byte(`{"message":[{"id":4217}]}`), "/message/0/id", "")
	f.Add(201, "", "", []byte(`{"a/b":{"m~n":"x"}}`), "/a~1b/m~0n", "X-Message-Id")
	f.Add(503, "120", "", []byte("<html>\n<body>busy</body>\n</html>"), "/id", "")
	f.Add(429, "Wed, 21 Oct 2026 07:28:00 GMT", "", []byte("slow down"), "/0", "")
	f.Add(302, "", "https://example.com/elsewhere", []byte{}, "/id", "")
	f.Add(400, "-1", "", []byte("\xff\xfe bad \x00 bytes"), "/", "")
	f.Add(500, "99999999999999999999", "", []byte(strings.Repeat("é", 300)), "/01", "")
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, code int, retryAfter, location string, body []byte, ptr, header string) {
		if code < 100 || code > 999 {
			return // net/http reads no other status
		}
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("Location", location)
		h.Set("X-Message-Id", string(body))
		resp := &http.Response{StatusCode: code, Status: http.StatusText(code), Header: h}
		o := HTTPOutcome(resp, body, now)
		retry := code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
		switch {
		case code >= 200 && code < 300:
			if o.Kind != lifecycle.OutcomeDelivered {
				t.Fatalf("%d is %s", code, o.Kind)
			}
		case retry:
			if o.Kind != lifecycle.OutcomeRetry {
				t.Fatalf("%d is %s", code, o.Kind)
			}
		default:
			if o.Kind != lifecycle.OutcomeFailed {
				t.Fatalf("%d is %s", code, o.Kind)
			}
		}
		if !o.RetryAt.IsZero() && o.Kind != lifecycle.OutcomeRetry {
			t.Fatalf("a %s outcome with a retry time", o.Kind)
		}
		excerpt := strings.TrimPrefix(o.Text, resp.Status)
		if !strings.HasPrefix(o.Text, resp.Status) || strings.ContainsAny(excerpt, "\r\n\t") && !strings.ContainsAny(location, "\r\n\t") {
			t.Fatalf("text %q is not the status and one line", o.Text)
		}
		if utf8.ValidString(resp.Status+location) && !utf8.ValidString(o.Text) {
			t.Fatalf("text %q is not UTF-8", o.Text)
		}
		if len(o.Text) > len(resp.Status)+len(" to ")+len(location)+len(": ")+3*bodyExcerpt {
			t.Fatalf("text of %d bytes from a body of %d", len(o.Text), len(body))
		}

		c := lifecycle.Correlation{JSON: ptr}
		if header != "" {
			c = lifecycle.Correlation{Header: "X-Message-Id"}
		}
		if c.Validate() != nil {
			return
		}
		if id, ok := externalID(c, h, body); ok && lifecycle.CheckExternalID("", id) != nil {
			t.Fatalf("id %q taken from %s", id, body)
		} else if !ok && id != "" && lifecycle.CheckExternalID("", id) == nil {
			t.Fatalf("good id %q not taken", id)
		}
	})
}
