package plainjson

import (
	"encoding/json"
	"testing"
)

func TestMarshal(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{"Bearer <token>", `"Bearer <token>"`},
		{map[string]string{"q": "a&b"}, `{"q":"a&b"}`},
		{json.RawMessage(`{"x":"<\/b>"}`), `{"x":"<\/b>"}`},
		{"line\n\"quoted\"", `"line\n\"quoted\""`},
		{[]int{1, 2}, `[1,2]`},
	} {
		got, err := Marshal(c.v)
		if err != nil || string(got) != c.want {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", c.v, got, err, c.want)
		}
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Error("Marshal of a func did not fail")
	}
}
