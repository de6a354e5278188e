package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
)

// TestNewcomersMistakes: the slips a first request makes are each named
// with what would have been taken, and change nothing.
func TestNewcomersMistakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	for _, c := range []struct {
		name, path, body string
		field, says      string
	}{
		{"a trailing comma", "/messages", `{"source":"erp","from":"a","to":"b","payload":"x",}`, "body", "is not JSON at byte 51: invalid character '}'"},
		{"single quotes", "/messages", `{'source':'erp'}`, "body", "is not JSON at byte 2"},
		{"cut short", "/messages", `{"source":"erp",`, "body", "is not JSON at byte 16: unexpected end of JSON input"},
		{"an array", "/messages", `[1]`, "body", "must be a JSON object"},
		{"no from", "/messages", `{"source":"erp","to":"b","payload":"x"}`, "from", "is required: 1 to 255 bytes"},
		{"a JSON payload as JSON", "/messages", `{"source":"erp","from":"a","to":"b","payload":{"order":1}}`, "payload",
			"must be a string, not object: a JSON document goes in it as text"},
		{"a time without its zone", "/messages", `{"source":"erp","from":"a","to":"b","payload":"x","deliver_at":"2026-12-07T17:00:00"}`,
			"deliver_at", `"2026-12-07T17:00:00" is not an RFC 3339 time such as 2026-12-01T08:00:00Z`},
		{"a header that is a number", "/messages", `{"source":"erp","from":"a","to":"b","payload":"x","headers":{"x-a":"1","x-b":2}}`,
			"headers.x-b", "must be a string, not number"},
		{"a content type that is not a media type", "/messages", `{"source":"erp","from":"a","to":"b","payload":"x","content_type":"json"}`,
			"content_type", `"json" is not a media type such as application/json`},
		{"a route without parties", "/routes", `{"source":"erp","target":"billing"}`, "from", `is required: a party's name, or "*" for any`},
		{"a target without a name", "/targets", `{"kind":"http","config":{"url":"http://127.0.0.1:9/"}}`, "name", "is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := b.admin(t, http.MethodPost, c.path, c.body).fails(t, http.StatusBadRequest, "INVALID_FIELD")
			found := false
			for _, p := range append(e.Details.Errors, httpapi.FieldProblem{Field: e.Details.Field, Problem: e.Details.Problem}) {
				if p.Field == c.field && strings.Contains(p.Problem, c.says) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: %+v", c.body, e)
			}
		})
	}
	b.unchanged(t, before)
}

// TestItemsAreNamedByTheirPlace: a value of an array that its type does
// not read is named by its index, as the docs name filter.status[1].
func TestItemsAreNamedByTheirPlace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.admin(t, http.MethodPost, "/operations", `{"action":"redeliver","filter":{"status":["error","failed"]},"dry_run":true}`).
		fails(t, http.StatusBadRequest, "INVALID_FIELD")
	if e.Details.Field != "filter.status[1]" || !strings.Contains(e.Details.Problem, `"failed"`) {
		t.Errorf("%+v", e)
	}
}
