package routing

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// TestDecodeJSON: a payload's JSON is read as encoding/json reads it, and
// what cannot be read exactly is an error where it is: a number no double
// holds, a key given twice.
func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		json string
		want any
	}{
		{`0`, 0.0},
		{`-0`, math.Copysign(0, -1)},
		{`3`, 3.0},
		{`9007199254740992`, 9007199254740992.0},
		{`9007199254740993`, "the number 9007199254740993 is not exactly a double"},
		{`-9223372036854775808`, "the number -9223372036854775808 is not exactly a double"},
		{`12345678901234567890`, "the number 12345678901234567890 is not exactly a double"},
		{`100000000000000000000`, 1e20},
		{`12.5`, 12.5},
		{`0.1`, 0.1},
		{`1.0`, 1.0},
		{`-0.0`, math.Copysign(0, -1)},
		{`1E2`, 100.0},
		{`0.0125e+2`, 1.25},
		{`0e99999999999999999999`, 0.0},
		{`1.7976931348623157e308`, math.MaxFloat64},
		{`5e-324`, 5e-324},
		{`0.30000000000000004`, 0.30000000000000004},
		{`123456789012345678901234567890`, "the number 123456789012345678901234567890 is not exactly"},
		{`0.1000000000000000000001`, "the number 0.1000000000000000000001 is not exactly"},
		{`1e400`, "the number 1e400 is not exactly"},
		{`-1e400`, "the number -1e400 is not exactly"},
		{`1e-400`, "the number 1e-400 is not exactly"},
		{`4e-324`, "the number 4e-324 is not exactly"},
		{` {"a": [1, 2.5, "x", true, false, null, {}, []], "b": {"c": "d"}} `,
			map[string]any{"a": []any{1.0, 2.5, "x", true, false, nil, map[string]any{}, []any{}}, "b": map[string]any{"c": "d"}}},
		{`{"a": 1, "a": 2, "b": 3}`, map[string]any{"a": `the key "a" is given more than once`, "b": 3.0}},
		{`{"a": 1, "b": 2, "a": 3}`, map[string]any{"a": `the key "a" is given more than once`, "b": 2.0}},
		{`{"s": "a\"\\\/\b\f\n\r\tb\u00e9\ud83d\ude00\u0000", "t": "é€", "u": "\u2028<&>"}`,
			map[string]any{"s": "a\"\\/\b\f\n\r\tbé😀\x00", "t": "é€", "u": "\u2028<&>"}},
		{"\"a\xffb\"", "a\ufffdb"},
	} {
		if !json.Valid([]byte(tc.json)) {
			t.Fatalf("%s is not JSON", tc.json)
		}
		if got := decodeJSON([]byte(tc.json)); !sameJSON(got, tc.want) {
			t.Errorf("decodeJSON(%s) = %#v; want %#v", tc.json, got, tc.want)
		}
	}
}

// sameJSON compares a decoded value with one wanted, where a string
// wanted of an error is the start of its text, and a double is compared
// bit for bit.
func sameJSON(got, want any) bool {
	switch g := got.(type) {
	case ref.Val:
		w, ok := want.(string)
		return ok && types.IsError(g) && strings.HasPrefix(g.(*types.Err).String(), w)
	case float64:
		w, ok := want.(float64)
		return ok && math.Float64bits(g) == math.Float64bits(w)
	case []any:
		w, ok := want.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range g {
			if !sameJSON(g[i], w[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		w, ok := want.(map[string]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for k := range g {
			if !sameJSON(g[k], w[k]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}

// TestExactNumbers: a filter reads a payload's numbers as doubles, as
// before, and one that reads a number no double holds, or a key given
// twice, fails naming it, while the rest of the payload reads as usual; a
// transform that copies the payload writes its numbers back as they were,
// or fails naming one it cannot. The audit's reading of before, under
// legacyBound, rounds such a number, keeps a key's last value, and reads
// a payload with a number past a double's range as text.
func TestExactNumbers(t *testing.T) {
	exact := `{"account": 9007199254740992, "big": 12345678901234567890, "qty": 3, "price": 12.5}`
	inexact := `{"huge": 1e400, "twice": 1, "twice": 2, "name": "x"}`
	for _, tc := range []struct {
		payload, filter, want, legacy string
	}{
		{exact, "message.payload.account == 9007199254740992.0", "true", "true"},
		{exact, "message.payload.qty * 2.0 == 6.0 && message.payload.price * 2.0 == 25.0", "true", "true"},
		{exact, "message.payload.qty > 2 && message.payload.price > 12", "true", "true"},
		{exact, "message.payload.big > 0.0", "the number 12345678901234567890 is not exactly a double", "true"},
		{inexact, "message.payload.huge > 0.0", "the number 1e400 is not exactly a double", "no such key: huge"},
		{inexact, "message.payload.twice > 0.0", `the key "twice" is given more than once`, "no such key: twice"},
		{inexact, "has(message.payload.twice)", `the key "twice" is given more than once`, "false"},
		{inexact, `message.payload.name == "x"`, "true", "no such key: name"},
	} {
		p, err := CompileFilter(tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		m := Message{ContentType: "application/json", Payload: []byte(tc.payload)}
		for _, c := range []struct {
			bound, want string
		}{{CostBound, tc.want}, {legacyBound, tc.legacy}} {
			ok, err := p.evalUnder(newInput(m, c.bound != CostBound), c.bound)
			got := fmt.Sprint(ok)
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("%s under %s: %s; want %s", tc.filter, c.bound, got, c.want)
			}
		}
	}

	for _, tc := range []struct {
		payload, body, err string
	}{
		{`{"id": 9007199254740992, "n": -3, "x": [0.1, 1e20, 1.0]}`,
			`{"data":{"id":9007199254740992,"n":-3,"x":[0.1,100000000000000000000,1]}}`, ""},
		{`{"id": 12345678901234567890}`, "", "payload: the number 12345678901234567890 is not exactly a double"},
		{`{"id": 1, "x": 1e400}`, "", "payload: the number 1e400 is not exactly a double"},
		{`{"id": 1, "id": 2}`, "", `payload: the key "id" is given more than once`},
	} {
		p, err := CompileTransform(`{"payload": {"data": message.payload}}`)
		if err != nil {
			t.Fatal(err)
		}
		m := Message{ContentType: "application/json", Payload: []byte(tc.payload)}
		s, err := p.Transform(m, NewInput(m), maxPayload)
		if tc.err == "" && (err != nil || string(s.Body) != tc.body) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %s, %v; want %s%s", tc.payload, s.Body, err, tc.body, tc.err)
		}
	}
}

// FuzzDecodeJSON: every JSON text decodes, and to what encoding/json
// decodes it to, but for its numbers, which are the same number where
// they are exact, and errors where a key is given twice or a number is
// not exact.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{`{"amount": 1500, "id": "in-7", "tags": ["a", "b"]}`, `[1, 2.5, -0, 1e400, 12345678901234567890]`,
		`{"a": {"b": [null, true, false, "\u00e9\ud83d"]}, "a": 1}`, `"\u0000\n\\"`, `0.1000000000000000000001`, "\"\xff\""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var want any
		wantErr := json.Unmarshal(data, &want)
		if !agrees(decodeJSON(data), want, wantErr != nil) {
			t.Fatalf("decodeJSON(%q) = %#v; encoding/json %#v, %v", data, decodeJSON(data), want, wantErr)
		}
	})
}

// agrees reports whether got, as decodeJSON reads a JSON text, agrees with
// want, as encoding/json reads it, which failed where a number is past a
// double's range (failed).
func agrees(got, want any, failed bool) bool {
	switch g := got.(type) {
	case ref.Val:
		return types.IsError(g)
	case float64:
		f, ok := want.(float64)
		return failed || ok && f == g
	case []any:
		w, ok := want.([]any)
		if failed {
			w, ok = make([]any, len(g)), true
		}
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range g {
			if !agrees(g[i], w[i], failed) {
				return false
			}
		}
		return true
	case map[string]any:
		w, ok := want.(map[string]any)
		if failed {
			w, ok = map[string]any{}, true
			for k := range g {
				w[k] = nil
			}
		}
		if !ok || len(g) != len(w) {
			return false
		}
		for k := range g {
			if !agrees(g[k], w[k], failed) {
				return false
			}
		}
		return true
	}
	return failed || reflect.DeepEqual(got, want)
}
