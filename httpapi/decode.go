package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// readJSON reads the request's body, a JSON object, into v: the media type
// must be JSON (415), the body within the limit (413), and every field one
// of v's, of the right type (400, naming the field). emptyOK lets a request
// send no body, as the operator actions do.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) error {
	if emptyOK && r.ContentLength == 0 {
		// No body at all, as `curl -X POST` sends: nothing to decode, so
		// no content type to ask for.
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return &mediaTypeError{got: ct}
	}
	limit := s.cfg.MaxPayload
	if r.ContentLength > limit {
		return &http.MaxBytesError{Limit: limit}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return tooLarge
	}
	if err != nil {
		return fieldError("body", "could not be read: "+err.Error())
	}
	if emptyOK && len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return decodeStrict(data, v)
}

// decodeStrict decodes the JSON object data into the struct v points to.
// Unlike encoding/json it matches names exactly, refuses names v has no
// field for and names an object gives twice, and reports every problem as
// a *lifecycle.FieldError with the field's path (such as "retry.jitter"),
// all of them joined in ErrInvalid.
func decodeStrict(data []byte, v any) error {
	return invalid(decodeValue(data, reflect.ValueOf(v).Elem(), "")...)
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodeValue decodes data into v: field by field for a struct (or a
// pointer to one), as a whole for anything else.
func decodeValue(data []byte, v reflect.Value, path string) []error {
	t := v.Type()
	if t.Kind() == reflect.Pointer && isObject(t.Elem()) {
		if string(data) == "null" {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		return decodeValue(data, v.Elem(), path)
	}
	if !isObject(t) {
		if err := json.Unmarshal(data, v.Addr().Interface()); err != nil {
			if errs := itemErrors(data, t, path); len(errs) > 0 {
				return errs
			}
			return []error{&lifecycle.FieldError{Field: path, Problem: valueProblem(err, t)}}
		}
		// A value read whole (a map, an array, a kind's raw config) may hold
		// objects at any depth, of which encoding/json keeps a repeated
		// name's last value without a word.
		return repeatedWithin(data, path)
	}
	object, repeated, ok := members(data)
	if !ok || (object == nil && path == "") {
		return []error{&lifecycle.FieldError{Field: orBody(path), Problem: notObject(data)}}
	}
	fields := jsonFields(t)
	errs := repeats(path, repeated)
	for _, name := range slices.Sorted(maps.Keys(object)) {
		index, ok := fields[name]
		if !ok {
			errs = append(errs, &lifecycle.FieldError{Field: join(path, keyName(name)),
				Problem: "is not a field here: " + allowedAre(slices.Sorted(maps.Keys(fields)))})
			continue
		}
		errs = append(errs, decodeValue(object[name], v.Field(index), join(path, name))...)
	}
	return errs
}

// itemErrors names each item of data, a JSON object read into a map of
// type t at path (each by its key) or an array read into a slice (each as
// path[i]), that is not of the items' type; none when t is neither or
// data is not what t reads.
func itemErrors(data []byte, t reflect.Type, path string) []error {
	var errs []error
	item := func(field string, raw json.RawMessage) {
		if err := json.Unmarshal(raw, reflect.New(t.Elem()).Interface()); err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: field, Problem: valueProblem(err, t.Elem())})
		}
	}
	switch t.Kind() {
	case reflect.Map:
		object, _, ok := members(data)
		if !ok {
			return nil
		}
		for _, key := range slices.Sorted(maps.Keys(object)) {
			item(join(path, keyName(key)), object[key])
		}
	case reflect.Slice:
		var items []json.RawMessage
		if t.Elem().Kind() == reflect.Uint8 || json.Unmarshal(data, &items) != nil {
			return nil
		}
		for i, raw := range items {
			item(fmt.Sprintf("%s[%d]", path, i), raw)
		}
	}
	return errs
}

// notObject says why data, which members refused, is not one JSON object:
// where it stops being JSON (a body a shell's quoting broke), or that it
// is JSON of another kind.
func notObject(data []byte) string {
	var v any
	err := json.Unmarshal(data, &v)
	var syntax *json.SyntaxError
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return "must be a JSON object, and is empty"
	case errors.As(err, &syntax):
		return fmt.Sprintf("must be a JSON object, and is not JSON at byte %d: %v", syntax.Offset, err)
	}
	return "must be a JSON object"
}

// members reads the JSON object data by name, with the names it gives
// more than once, whose last value encoding/json would keep without a word.
// ok is false when data is not one object; null is an object of none.
func members(data []byte) (object map[string]json.RawMessage, repeated []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, err == nil && tok == nil && atEnd(dec)
	}
	object = map[string]json.RawMessage{}
	seen := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		name, isName := tok.(string)
		var value json.RawMessage
		if err != nil || !isName || dec.Decode(&value) != nil {
			return nil, nil, false
		}
		if seen[name]++; seen[name] == 2 {
			repeated = append(repeated, name)
		}
		object[name] = value
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, false
	}
	return object, repeated, atEnd(dec)
}

// atEnd reports whether nothing but white space is left for dec.
func atEnd(dec *json.Decoder) bool {
	_, err := dec.Token()
	return err == io.EOF
}

// repeatedWithin refuses the names that any object within the JSON value
// data, itself at path, repeats, each named by its path (arrays' items as
// path[i]).
func repeatedWithin(data []byte, path string) []error {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' && trimmed[0] != '[' {
		return nil // a scalar, such as a payload, holds no object
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var errs []error
	var walk func(path string) bool
	walk = func(path string) bool {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]int{}
			var repeated []string
			for dec.More() {
				tok, err := dec.Token()
				name, ok := tok.(string)
				if err != nil || !ok {
					return false
				}
				if seen[name]++; seen[name] == 2 {
					repeated = append(repeated, name)
				}
				if !walk(join(path, keyName(name))) {
					return false
				}
			}
			errs = append(errs, repeats(path, repeated)...)
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if !walk(fmt.Sprintf("%s[%d]", path, i)) {
					return false
				}
			}
		default:
			return true
		}
		_, err = dec.Token() // the closing brace or bracket
		return err == nil
	}
	walk(path)
	return errs
}

// repeats are the refusals of the names an object at path repeats.
func repeats(path string, names []string) []error {
	var errs []error
	for _, name := range names {
		errs = append(errs, &lifecycle.FieldError{Field: join(path, keyName(name)), Problem: "is given more than once"})
	}
	return errs
}

// isObject reports a struct decoded field by field: one without its own
// JSON or text decoding.
func isObject(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(jsonUnmarshaler) &&
		!reflect.PointerTo(t).Implements(textUnmarshaler)
}

// jsonFields maps the JSON names of a struct's fields to their index.
func jsonFields(t reflect.Type) map[string]int {
	fields := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = i
	}
	return fields
}

// valueProblem says what a value should have been, in JSON's words.
func valueProblem(err error, t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var typeErr *json.UnmarshalTypeError
	var parseErr *time.ParseError
	switch {
	case errors.As(err, &parseErr):
		return fmt.Sprintf("%q is not an RFC 3339 time such as 2026-12-01T08:00:00Z", parseErr.Value)
	case !errors.As(err, &typeErr):
		return err.Error() // the type's own words, such as lifecycle.Duration's
	}
	switch {
	case reflect.PointerTo(t).Implements(textUnmarshaler), t.Kind() == reflect.String:
		return "must be a string, not " + typeErr.Value
	case t.Kind() == reflect.Bool:
		return "must be true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return fmt.Sprintf("must be a whole number, not %s", typeErr.Value)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "must be a number"
	case t.Kind() == reflect.Slice:
		return "must be an array"
	}
	return "must be a JSON object"
}

// allowedAre says which names a refused one could have been: an object
// or a query may take none.
func allowedAre(names []string) string {
	if len(names) == 0 {
		return "none is allowed"
	}
	return "allowed are " + strings.Join(names, ", ")
}

// keyName is a key as a refusal names it: an empty key is a key too, and
// the refusal must name it.
func keyName(name string) string {
	if name == "" {
		return `""`
	}
	return name
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func orBody(path string) string {
	if path == "" {
		return "body"
	}
	return path
}
