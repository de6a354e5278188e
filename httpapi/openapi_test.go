package httpapi_test

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// spec is the OpenAPI document, decoded.
type spec struct {
	doc     map[string]any
	paths   map[string]any
	schemas map[string]any
}

var (
	specOnce sync.Once
	specDoc  *spec
	specErr  error
)

// apiSpec decodes the embedded document once.
func apiSpec(t *testing.T) *spec {
	t.Helper()
	specOnce.Do(func() {
		var doc map[string]any
		if specErr = json.Unmarshal(httpapi.OpenAPI, &doc); specErr != nil {
			return
		}
		specDoc = &spec{doc: doc, paths: obj(doc["paths"]),
			schemas: obj(obj(doc["components"])["schemas"])}
	})
	if specErr != nil {
		t.Fatalf("openapi.json: %v", specErr)
	}
	return specDoc
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// resolve follows a local $ref.
func (s *spec) resolve(v any) map[string]any {
	m := obj(v)
	for {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		m = obj(s.pointer(ref))
	}
}

// pointer reads a "#/a/b" reference.
func (s *spec) pointer(ref string) any {
	var v any = s.doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		v = obj(v)[part]
	}
	return v
}

// refName is the schema name a $ref names, or "".
func refName(v any) string {
	ref, _ := obj(v)["$ref"].(string)
	name, ok := strings.CutPrefix(ref, "#/components/schemas/")
	if !ok {
		return ""
	}
	return name
}

// operation finds the documented operation of a concrete path, and its
// template.
func (s *spec) operation(method, path string) (map[string]any, string) {
	path, _, _ = strings.Cut(path, "?")
	segs := strings.Split(path, "/")
	for template, item := range s.paths {
		tsegs := strings.Split(template, "/")
		if len(tsegs) != len(segs) {
			continue
		}
		match := true
		for i := range tsegs {
			if !strings.HasPrefix(tsegs[i], "{") && tsegs[i] != segs[i] {
				match = false
				break
			}
		}
		if op := obj(obj(item)[strings.ToLower(method)]); match && op != nil {
			return op, template
		}
	}
	return nil, ""
}

// checkReply checks an answer against the document. A HEAD is checked as
// its GET, by status alone: it has no body.
func (s *spec) checkReply(method, path string, r *reply) []string {
	head := method == http.MethodHead
	if head {
		method = http.MethodGet
	}
	op, _ := s.operation(method, path)
	var resp map[string]any
	switch {
	case op == nil && (r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed ||
		r.status == http.StatusUnauthorized):
		// No operation: the error envelope of an unserved path.
		resp = s.resolve(obj(obj(s.doc["components"])["responses"])["NotFound"])
	case op == nil:
		return []string{"no documented operation"}
	default:
		responses := obj(op["responses"])
		resp = s.resolve(responses[strconv.Itoa(r.status)])
		if resp == nil && r.status >= 500 {
			resp = s.resolve(responses["default"])
		}
		if resp == nil {
			return []string{fmt.Sprintf("status %d is not documented", r.status)}
		}
	}
	content := obj(resp["content"])
	if content == nil || head {
		if len(r.body) > 0 {
			return []string{"a body where none is documented"}
		}
		return nil
	}
	media := obj(content["application/json"])
	if media == nil {
		return nil // the payload: any media type
	}
	if mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type")); mt != "application/json" {
		return []string{"Content-Type " + r.header.Get("Content-Type")}
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		return []string{err.Error()}
	}
	return s.validate(media["schema"], v, "body")
}

// validate checks a decoded JSON value against a schema: the keywords the
// document uses ($ref, type, enum, format, properties, required,
// additionalProperties, items, oneOf, minimum, maximum).
func (s *spec) validate(schemaV any, v any, at string) []string {
	sc := s.resolve(schemaV)
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, at+": "+fmt.Sprintf(format, args...)) }
	if one, ok := sc["oneOf"].([]any); ok {
		n := 0
		for _, alt := range one {
			if len(s.validate(alt, v, at)) == 0 {
				n++
			}
		}
		if n != 1 {
			bad("matches %d of the oneOf schemas, want 1", n)
		}
	}
	if types := typesOf(sc["type"]); len(types) > 0 && !slices.Contains(types, jsonType(v)) &&
		!(jsonType(v) == "integer" && slices.Contains(types, "number")) {
		bad("is %s, want %v", jsonType(v), types)
		return problems
	}
	if enum, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		bad("%v is not one of %v", v, enum)
	}
	if str, ok := v.(string); ok {
		switch sc["format"] {
		case "date-time":
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("%q is not RFC 3339", str)
			}
		case "uuid":
			if _, err := uuid.Parse(str); err != nil {
				bad("%q is not a UUID", str)
			}
		}
	}
	if n, ok := v.(float64); ok {
		if lo, ok := sc["minimum"].(float64); ok && n < lo {
			bad("%v is below %v", n, lo)
		}
		if hi, ok := sc["maximum"].(float64); ok && n > hi {
			bad("%v is above %v", n, hi)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props := obj(sc["properties"])
		for _, name := range slices.Sorted(maps.Keys(v)) {
			if p, ok := props[name]; ok {
				problems = append(problems, s.validate(p, v[name], at+"."+name)...)
			} else if extra, ok := sc["additionalProperties"]; ok && extra == false {
				bad("has %q, which is not documented", name)
			} else if ok && obj(extra) != nil {
				problems = append(problems, s.validate(extra, v[name], at+"."+name)...)
			}
		}
		if req, ok := sc["required"].([]any); ok {
			for _, name := range req {
				if _, ok := v[name.(string)]; !ok {
					bad("lacks %q", name)
				}
			}
		}
	case []any:
		if items, ok := sc["items"]; ok {
			for i, item := range v {
				problems = append(problems, s.validate(items, item, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	return problems
}

func typesOf(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, t := range v {
			out = append(out, t.(string))
		}
		return out
	}
	return nil
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if v == math.Trunc(v) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}

var (
	timeType  = reflect.TypeFor[time.Time]()
	uuidType  = reflect.TypeFor[uuid.UUID]()
	rawType   = reflect.TypeFor[json.RawMessage]()
	textType  = reflect.TypeFor[encoding.TextMarshaler]()
	canonical = map[reflect.Type][]string{
		reflect.TypeFor[lifecycle.MessageStatus]():   lifecycle.Strings(lifecycle.MessageStatuses),
		reflect.TypeFor[lifecycle.MessageStage]():    lifecycle.Strings(lifecycle.MessageStages),
		reflect.TypeFor[lifecycle.DeliveryState]():   lifecycle.Strings(lifecycle.DeliveryStates),
		reflect.TypeFor[lifecycle.RetryStrategy]():   lifecycle.Strings(lifecycle.RetryStrategies),
		reflect.TypeFor[journal.Kind]():              lifecycle.Strings(journal.Kinds()),
		reflect.TypeFor[httpapi.ReceiptOutcome]():    {string(httpapi.ReceiptPositive), string(httpapi.ReceiptNegative)},
		reflect.TypeFor[lifecycle.OperationAction](): lifecycle.Strings(lifecycle.OperationActions),
		reflect.TypeFor[lifecycle.OperationState]():  lifecycle.Strings(lifecycle.OperationStates),
	}
	// canonicalKeys are the keys of maps that count only some values of
	// their key type: a superseded delivery is counted nowhere.
	canonicalKeys = map[reflect.Type][]string{
		reflect.TypeFor[lifecycle.DeliveryState](): lifecycle.Strings(lifecycle.CountedStates),
	}
)

// compare checks that a schema describes the Go type as encoding/json
// writes and reads it: the same field names, no others allowed, the same
// JSON types, and the canonical set as the enum of a named string type.
func (s *spec) compare(schemaV any, t reflect.Type, at string) []string {
	sc := s.resolve(schemaV)
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, at+": "+fmt.Sprintf(format, args...)) }
	// A nullable schema (oneOf with null) describes a pointer's target; a
	// oneOf beside a type only constrains it.
	if one, ok := sc["oneOf"].([]any); ok && t != rawType && sc["type"] == nil {
		var kept []any
		for _, alt := range one {
			if !slices.Equal(typesOf(s.resolve(alt)["type"]), []string{"null"}) {
				kept = append(kept, alt)
			}
		}
		if len(kept) != 1 {
			bad("a oneOf of %d non-null schemas describes %s", len(kept), t)
			return problems
		}
		return s.compare(kept[0], t, at)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	types := slices.DeleteFunc(typesOf(sc["type"]), func(s string) bool { return s == "null" })
	want := func(jsonType string) {
		if !slices.Equal(types, []string{jsonType}) {
			bad("schema type %v, but %s is written as %s", types, t, jsonType)
		}
	}
	switch {
	case t == rawType:
		// Any JSON: the schema says which.
	case t == timeType:
		want("string")
		if sc["format"] != "date-time" {
			bad("a time without format date-time")
		}
	case t == uuidType:
		want("string")
		if sc["format"] != "uuid" {
			bad("a UUID without format uuid")
		}
	case t.Implements(textType) || t.Kind() == reflect.String:
		want("string")
		if set, ok := canonical[t]; ok {
			var enum []string
			for _, e := range sc["enum"].([]any) {
				enum = append(enum, e.(string))
			}
			if !sameSet(enum, set) {
				bad("enum %v, but %s is %v", enum, t, set)
			}
		}
	case t.Kind() == reflect.Bool:
		want("boolean")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		want("integer")
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want("number")
	case t.Kind() == reflect.Slice:
		want("array")
		problems = append(problems, s.compare(sc["items"], t.Elem(), at+"[]")...)
	case t.Kind() == reflect.Map:
		want("object")
		for name, p := range obj(sc["properties"]) {
			problems = append(problems, s.compare(p, t.Elem(), at+"."+name)...)
		}
		set, ok := canonicalKeys[t.Key()]
		if !ok {
			set, ok = canonical[t.Key()]
		}
		if ok && !sameSet(slices.Collect(maps.Keys(obj(sc["properties"]))), set) {
			bad("properties %v, but the keys are %v", slices.Sorted(maps.Keys(obj(sc["properties"]))), set)
		}
	case t.Kind() == reflect.Struct:
		want("object")
		if sc["additionalProperties"] != false {
			bad("additionalProperties is not false")
		}
		props := obj(sc["properties"])
		fields := map[string]reflect.Type{}
		// An embedded struct without a tag gives its fields, as
		// encoding/json does.
		for _, f := range reflect.VisibleFields(t) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				continue
			}
			if f.IsExported() && name != "-" {
				fields[name] = f.Type
			}
		}
		if !sameSet(slices.Collect(maps.Keys(props)), slices.Collect(maps.Keys(fields))) {
			bad("properties %v, but %s has %v", slices.Sorted(maps.Keys(props)), t, slices.Sorted(maps.Keys(fields)))
		}
		for _, name := range typesOf(sc["required"]) {
			if _, ok := fields[name]; !ok {
				bad("requires %q, which %s lacks", name, t)
			}
		}
		for name, ft := range fields {
			if p, ok := props[name]; ok {
				problems = append(problems, s.compare(p, ft, at+"."+name)...)
			}
		}
	default:
		bad("no rule for %s", t)
	}
	return problems
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

// TestOpenAPIDescribesEveryRoute holds the route table and the document
// together: every route is documented with its permission, success status
// and body types; every documented operation is served; the mux serves
// each under the documented pattern; examples decode into the Go types.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	s := apiSpec(t)
	if s.doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %v, want 3.1.0", s.doc["openapi"])
	}
	if url := obj(s.doc["servers"].([]any)[0])["url"]; url != httpapi.Prefix {
		t.Errorf("server url %v, want %s", url, httpapi.Prefix)
	}
	api, err := httpapi.New(httpapi.Config{Writer: nil, DB: nil, Auth: testTokens})
	if err == nil || api != nil {
		t.Fatal("New accepted a config without Writer and DB")
	}
	api = setup(t).api

	served := map[string]bool{}
	for _, rt := range httpapi.Routes() {
		name := rt.Method + " " + rt.Path
		served[name] = true
		op := obj(obj(s.paths[rt.Path])[strings.ToLower(rt.Method)])
		if op == nil {
			t.Errorf("%s is served and not documented", name)
			continue
		}
		if op["x-permission"] != rt.Permission {
			t.Errorf("%s: documented permission %v, served %s", name, op["x-permission"], rt.Permission)
		}
		if documented := paramsIn(s, op, "query"); !sameSet(documented, rt.Params) {
			t.Errorf("%s: documented query parameters %v, taken %v", name, documented, rt.Params)
		}
		resp := s.resolve(obj(op["responses"])[strconv.Itoa(rt.Status)])
		if resp == nil {
			t.Errorf("%s: success status %d not documented", name, rt.Status)
			continue
		}
		if rt.Response != nil {
			schema := obj(obj(resp["content"])["application/json"])["schema"]
			if got := refName(schema); got != rt.Response.Name() {
				t.Errorf("%s: documented answer %q, served %s", name, got, rt.Response)
			}
			for _, p := range s.compare(schema, rt.Response, name+" answer") {
				t.Error(p)
			}
		}
		body := s.resolve(op["requestBody"])
		switch {
		case rt.Request == nil && body != nil:
			t.Errorf("%s: a body is documented and none is read", name)
		case rt.Request != nil && body == nil:
			t.Errorf("%s: a body is read and none is documented", name)
		case rt.Request != nil:
			media := obj(obj(body["content"])["application/json"])
			if got := refName(media["schema"]); got != rt.Request.Name() {
				t.Errorf("%s: documented body %q, read as %s", name, got, rt.Request)
			}
			for _, p := range s.compare(media["schema"], rt.Request, name+" body") {
				t.Error(p)
			}
			if example, ok := media["example"]; ok {
				data, _ := json.Marshal(example)
				if err := httpapi.DecodeStrict(data, reflect.New(rt.Request).Interface()); err != nil {
					t.Errorf("%s: the example does not decode: %v", name, err)
				}
				for _, p := range s.validate(media["schema"], example, name+" example") {
					t.Error(p)
				}
			}
		}
	}

	for path, item := range s.paths {
		for method := range obj(item) {
			name := strings.ToUpper(method) + " " + path
			if !served[name] {
				t.Errorf("%s is documented and not served", name)
				continue
			}
			concrete := path
			for _, param := range []string{"{id}", "{delivery_id}"} {
				concrete = strings.ReplaceAll(concrete, param, uuid.NewString())
			}
			concrete = strings.ReplaceAll(concrete, "{name}", "billing")
			r := httptest.NewRequest(strings.ToUpper(method), httpapi.Prefix+concrete, nil)
			if got, want := api.Pattern(r), strings.ToUpper(method)+" "+httpapi.Prefix+path; got != want {
				t.Errorf("%s %s is served as %q, want %q", strings.ToUpper(method), concrete, got, want)
			}
			for _, p := range paramsIn(s, obj(item)[method], "path") {
				if !strings.Contains(path, "{"+p+"}") {
					t.Errorf("%s documents path parameter %s, which its path lacks", name, p)
				}
			}
		}
	}

	// The error envelope and the codes.
	for _, p := range s.compare(s.schemas["Error"], reflect.TypeFor[httpapi.ErrorResponse](), "Error") {
		t.Error(p)
	}
	var codes []string
	for _, c := range s.resolve(obj(obj(s.resolve(s.schemas["Error"])["properties"])["error"])["properties"].(map[string]any)["code"])["enum"].([]any) {
		codes = append(codes, c.(string))
	}
	if !sameSet(codes, httpapi.Codes) {
		t.Errorf("documented codes %v, the server's %v", codes, httpapi.Codes)
	}
	// Every schema's own examples are valid.
	for name, sc := range s.schemas {
		examples, _ := obj(sc)["examples"].([]any)
		for _, ex := range examples {
			for _, p := range s.validate(sc, ex, name+" example") {
				t.Error(p)
			}
		}
	}
}

// paramsIn lists the parameters an operation documents in the path or
// the query.
func paramsIn(s *spec, op any, in string) []string {
	var out []string
	params, _ := obj(op)["parameters"].([]any)
	for _, p := range params {
		if p := s.resolve(p); p["in"] == in {
			out = append(out, p["name"].(string))
		}
	}
	return out
}
