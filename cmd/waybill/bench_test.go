package main

import "testing"

// TestCreatedID: the bench reads the id of a created message from the
// first member of the answer, and nothing from any other answer.
func TestCreatedID(t *testing.T) {
	for _, c := range []struct{ answer, want string }{
		{`{"id":"0190-a","status":"queued","deliveries":[{"id":"x"}]}`, "0190-a"},
		{`{"id": "0190-b"}`, "0190-b"},
		{`{"status":"queued","id":"0190-c"}`, ""},
		{`{"id":7}`, ""},
		{`[]`, ""},
		{``, ""},
	} {
		if got := createdID([]byte(c.answer)); got != c.want {
			t.Errorf("createdID(%s) = %q, want %q", c.answer, got, c.want)
		}
	}
}
