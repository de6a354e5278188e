package routing

import (
	"errors"
	"maps"
	"runtime"
	"strings"
	"testing"

	"github.com/waybill/waybill/lifecycle"
)

// maxPayload is the bound on a payload a transform makes in the tests,
// the server's default.
const maxPayload = 10 << 20

// TestTransformMatrix is the types × filter × transform matrix: the
// fan-out of each message, and what each target's transform makes of its
// delivery.
func TestTransformMatrix(t *testing.T) {
	routes := []lifecycle.Route{
		route("billing", []string{"invoice.*"}, "has(message.payload.amount) && message.payload.amount > 1000"),
		route("ledger", []string{"invoice.*"}, ""),
		route("audit", nil, ""),
	}
	table, err := NewTable(routes, nil)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := NewTransforms(map[string]lifecycle.Target{
		// billing wants its own format, at a path of the invoice's kind.
		"billing": {Name: "billing", Transform: `{"payload": {"invoice": message.payload.id, "cents": int(message.payload.amount * 100.0)},
			"path": "/invoices/" + message.type.split(".")[1], "method": "PUT", "headers": {"X-Kind": message.type}}`},
		// ledger takes text, and no test traffic.
		"ledger": {Name: "ledger", Transform: `"x-test" in message.headers ? {"cancel": "test traffic"} :
			{"payload": message.type + " " + string(message.payload.id), "content_type": "text/csv"}`},
		"audit": {Name: "audit"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const json = "application/json"
	type out struct {
		body, contentType, path, method, cancel, err string
		headers                                      map[string]string
	}
	for _, tc := range []struct {
		name   string
		m      Message
		shapes map[string]out // by target; a target without one is sent unchanged
	}{
		{"large invoice", Message{Type: "invoice.created", ContentType: json, Payload: []byte(`{"id":"in-1","amount":1500.25}`)},
			map[string]out{
				"billing": {body: `{"cents":150025,"invoice":"in-1"}`, contentType: json, path: "/invoices/created", method: "PUT",
					headers: map[string]string{"x-kind": "invoice.created"}},
				"ledger": {body: "invoice.created in-1", contentType: "text/csv"},
				"audit":  {},
			}},
		{"small invoice", Message{Type: "invoice.paid", ContentType: json, Payload: []byte(`{"id":"in-2","amount":10}`)},
			map[string]out{"ledger": {body: "invoice.paid in-2", contentType: "text/csv"}, "audit": {}}},
		{"test invoice", Message{Type: "invoice.paid", Headers: map[string]string{"x-test": "1"}, ContentType: json, Payload: []byte(`{"id":"in-3","amount":10}`)},
			map[string]out{"ledger": {cancel: "test traffic"}, "audit": {}}},
		{"invoice without id", Message{Type: "invoice.paid", ContentType: json, Payload: []byte(`{"amount":5000}`)},
			map[string]out{"billing": {err: "no such key: id"}, "ledger": {err: "no such key: id"}, "audit": {}}},
		{"order", Message{Type: "order.created", ContentType: json, Payload: []byte(`{}`)},
			map[string]out{"audit": {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.m.Source, tc.m.From, tc.m.To, tc.m.Size = "shop", "a", "b", int64(len(tc.m.Payload))
			d := table.Match(tc.m)
			if got := d.Targets; !equalKeys(got, tc.shapes) {
				t.Fatalf("targets %v; want those of %v", got, tc.shapes)
			}
			in := NewInput(tc.m)
			for _, target := range d.Targets {
				want := tc.shapes[target]
				s := tf.Shape(target, tc.m, in, maxPayload)
				var got out
				if s != nil {
					got = out{body: string(s.Body), contentType: s.ContentType, path: s.Path, method: s.Method, cancel: s.Cancel, headers: s.Headers}
					if s.Error != "" {
						got = out{err: s.Error}
					}
				}
				if want.err != "" && strings.Contains(got.err, want.err) {
					continue
				}
				if got.body != want.body || got.contentType != want.contentType || got.path != want.path || got.method != want.method ||
					got.cancel != want.cancel || got.err != want.err || !maps.Equal(got.headers, want.headers) {
					t.Errorf("%s: shape %+v; want %+v", target, got, want)
				}
			}
		})
	}
}

func equalKeys[V any](targets []string, m map[string]V) bool {
	if len(targets) != len(m) {
		return false
	}
	for _, t := range targets {
		if _, ok := m[t]; !ok {
			return false
		}
	}
	return true
}

// TestTransformRefusesAtRunTime: what a transform yields that cannot be
// sent fails it, with a reason that says what is allowed.
func TestTransformRefusesAtRunTime(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{`{"body": "x"}`, `yields the key "body": allowed are payload`},
		{`{"path": "/a/../b"}`, "must not have a . or .. segment"},
		{`{"path": "/a/%2E%2E/b"}`, "must not have a . or .. segment"},
		{`{"path": "//evil.example/x?y"}`, `holds "?"`},
		{`{"path": "x"}`, "must start with /"},
		{`{"method": "DELETE"}`, "allowed are POST, PUT, PATCH"},
		{`{"headers": {"Idempotency-Key": "x"}}`, `"idempotency-key" is reserved`},
		{`{"headers": {"webhook-id": "x"}}`, `"webhook-id" is reserved`},
		{`{"headers": {"x-n": 1}}`, `"x-n" must be a string`},
		{`{"cancel": ""}`, "cancel must be a reason"},
		{`{"cancel": "x", "path": "/a"}`, "cancel comes alone"},
		{`{"content_type": "text/plain"}`, "needs a payload"},
		{`{"payload": "x", "content_type": "not a type"}`, "is not a media type"},
		{`{"payload": message.payload.all(a, message.payload.all(b, a + b >= 0))}`, "cost limit"},
	} {
		p, err := CompileTransform(tc.src)
		if err != nil {
			t.Errorf("CompileTransform(%q): %v", tc.src, err)
			continue
		}
		list := "[" + strings.Repeat("1,", 2000) + "1]"
		m := Message{Source: "shop", ContentType: "application/json", Payload: []byte(list)}
		if _, err := p.Transform(m, NewInput(m), maxPayload); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("transform %s: %v; want an error with %q", tc.src, err, tc.want)
		}
	}
}

// TestCompileTransformRefuses: a transform that does not compile, or
// cannot yield a map, is refused on transform with where and why.
func TestCompileTransformRefuses(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{`{"payload": message.payload`, "at 1:28:"},
		{`"text"`, "must yield a map(string, dyn), yields a string"},
		{`{"payload": message.paylod}`, `at 1:20: message has no field "paylod"`},
	} {
		_, err := CompileTransform(tc.src)
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != "transform" || !strings.Contains(fe.Problem, tc.want) {
			t.Errorf("CompileTransform(%q) = %v; want a problem of transform with %q", tc.src, err, tc.want)
		}
	}
}

// TestTransformUnchanged: a transform that yields the message as it is
// stores nothing.
func TestTransformUnchanged(t *testing.T) {
	tf, err := NewTransforms(map[string]lifecycle.Target{"t": {Transform: `{"payload": message.payload}`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := Message{ContentType: "application/json", Payload: []byte(`{"a":1}`)}
	if s := tf.Shape("t", m, NewInput(m), maxPayload); s != nil {
		t.Fatalf("shape %+v; want none", s)
	}
}

// TestCancelTestTrafficTransform is the example of routing.md: test
// traffic is cancelled, the rest sent as it is.
func TestCancelTestTrafficTransform(t *testing.T) {
	tf, err := NewTransforms(map[string]lifecycle.Target{"t": {Transform: `'x-test' in message.headers ? {'cancel': 'test traffic'} : {}`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	test := Message{Headers: map[string]string{"x-test": "1"}, Payload: []byte("x")}
	if s := tf.Shape("t", test, NewInput(test), maxPayload); s == nil || s.Cancel != "test traffic" {
		t.Errorf("test traffic: %+v", s)
	}
	other := Message{Payload: []byte("x")}
	if s := tf.Shape("t", other, NewInput(other), maxPayload); s != nil {
		t.Errorf("other traffic: %+v", s)
	}
}

// TestTransformReasonsAreCut: a reason to cancel, or an error, that
// quotes a payload of megabytes is cut in the shape.
func TestTransformReasonsAreCut(t *testing.T) {
	tf, err := NewTransforms(map[string]lifecycle.Target{
		"cancel": {Transform: `{'cancel': string(message.payload)}`},
		"error":  {Transform: `{'method': string(message.payload)}`},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := Message{ContentType: "text/plain", Payload: []byte(strings.Repeat("x", 2<<20))}
	for _, target := range []string{"cancel", "error"} {
		s := tf.Shape(target, m, NewInput(m), maxPayload)
		if s == nil || len(s.Cancel+s.Error) > lifecycle.MaxErrorTextLength || !strings.HasSuffix(s.Cancel+s.Error, "x"+lifecycle.CutMark) {
			t.Errorf("%s: %.300v", target, s)
		}
	}
}

// TestCheckPath: a path stays under its target's URL however the receiver
// decodes it: no step up or in place, escaped once or twice or cut at a
// path parameter, and no separator escaped.
func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		path, want string // want is "" for a path taken
	}{
		{"", ""},
		{"/", ""},
		{"/invoices/in-7", ""},
		{"/a/b%20c/%E2%82%AC", ""},
		{"/a/...", ""},
		{"/a/..b/.c", ""},
		{"/a/%3Bb", ""},
		{"/a/%25", ""},
		{"/a/../b", "must not have a . or .. segment"},
		{"/a/./b", "must not have a . or .. segment"},
		{"/a/..", "must not have a . or .. segment"},
		{"/a/%2E%2E/b", "must not have a . or .. segment"},
		{"/a/%2e./b", "must not have a . or .. segment"},
		{"/a/%252E%252E/b", "must not have a . or .. segment"},
		{"/a/..%3B/b", "must not have a . or .. segment"},
		{"/a/..%253Bx/b", "must not have a . or .. segment"},
		{"/..%2F..%2Fadmin", `escaped / or \`},
		{"/%2E%2E%2F%2E%2E%2Fadmin", `escaped / or \`},
		{"/a%2fb", `escaped / or \`},
		{"/..%5C..%5Cadmin", `escaped / or \`},
		{"/a%5cb", `escaped / or \`},
		{"/a%252Fb", `escaped / or \`},
		{"/..;/..;/admin", "must not hold a ;"},
		{"/a;x=1", "must not hold a ;"},
		{"//evil.example/x?y", `holds "?"`},
		{`/a\b`, `holds "\\"`},
		{"/a#b", `holds "#"`},
		{"/a/%zz", `holds "%"`},
		{"x", "must start with /"},
		{"/" + strings.Repeat("a", maxPath), "at most 1024 bytes"},
	} {
		err := CheckPath(tc.path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckPath(%q) = %v; want %q", tc.path, err, tc.want)
		}
	}
}

// TestTransformPayloadBound: a transform's payload is written out only up
// to the bound, so one that holds a value many times (each copy costing
// the transform nothing) fails with the bound named rather than being
// made whole; one within it is the JSON of what the transform made, its
// integers as they are.
func TestTransformPayloadBound(t *testing.T) {
	const limit = 1 << 20
	customer := strings.Repeat("c", 200_000)
	items := "[" + strings.Repeat(`{"sku": "A-1"},`, 1_499) + `{"sku": "A-2"}]`
	orders := Message{ContentType: "application/json", Payload: []byte(`{"customer": "` + customer + `", "items": ` + items + `}`)}
	text := Message{ContentType: "text/plain", Payload: []byte(strings.Repeat("t", limit+1))}
	small := Message{ContentType: "application/json", Payload: []byte(`{"id": "in-7", "lines": [1, 2.5, "x", null, true, {}]}`)}
	for _, tc := range []struct {
		transform string
		m         Message
		body, err string
	}{
		{`{"payload": {"lines": message.payload.items.map(i, {"sku": i.sku, "customer": message.payload.customer})}}`, orders, "",
			"payload: more than 1048576 bytes, the most a payload may have"},
		{`{"payload": [message.payload.customer]` + strings.Repeat(".map(a, [a, a])", 40) + `}`, orders, "", "more than 1048576 bytes"},
		{`{"payload": message.payload, "content_type": "text/csv"}`, text, "", "more than 1048576 bytes"},
		{`{"payload": {"data": message.payload}}`, small, `{"data":{"id":"in-7","lines":[1,2.5,"x",null,true,{}]}}`, ""},
		{`{"payload": {"n": 12345678901234567890u, "i": -9007199254740993, "d": 0.5}}`, small,
			`{"d":0.5,"i":-9007199254740993,"n":12345678901234567890}`, ""},
		{`{"payload": {"b": b"hi", "t": timestamp("2020-01-01T00:00:00Z"), "s": "<a>&"}}`, small,
			`{"b":"aGk=","s":"\u003ca\u003e\u0026","t":"2020-01-01T00:00:00Z"}`, ""},
		{`{"payload": [0.0 / 0.0]}`, small, `["NaN"]`, ""},
		{`{"payload": dyn({1: "a"})}`, small, "", "payload: a map's key must be a string"},
		{`dyn({1: "a"})`, small, "", "yields the key 1, which is not a string"},
	} {
		p, err := CompileTransform(tc.transform)
		if err != nil {
			t.Fatal(err)
		}
		in := NewInput(tc.m)
		in.activation(true)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s, err := p.Transform(tc.m, in, limit)
		runtime.ReadMemStats(&after)
		if tc.err == "" && (err != nil || string(s.Body) != tc.body) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%.80s: %.100s, %v; want %s%s", tc.transform, s.Body, err, tc.body, tc.err)
		}
		if made := after.TotalAlloc - before.TotalAlloc; made > 2*limit {
			t.Errorf("%.80s: allocated %d bytes", tc.transform, made)
		}
	}
}
