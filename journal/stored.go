package journal

import (
	"reflect"
	"strings"
	"time"
	"unicode/utf8"
)

// Precision is how finely PostgreSQL keeps a timestamptz.
const Precision = time.Microsecond

// StoredTime returns t as the database keeps it: in UTC, cut to
// Precision, without a monotonic reading. The zero time stays zero.
func StoredTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(Precision)
}

// StoredText returns s as the tables' text and the journal's payloads keep
// it: valid UTF-8 (each invalid run becomes U+FFFD, as encoding/json would
// write it) with no NUL, which text cannot hold, nor jsonb (the payloads
// of a journal created before they were json).
func StoredText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Normalize puts every time and string of the event, its payload
// included, in the form the database stores (StoredTime, StoredText), so
// that what the fold computes from an event equals what the tables and
// the journal give back. projection.Record calls it on every event a
// command makes; a payload type needs nothing of its own for it.
func Normalize(e *Event) {
	e.RecordedAt = StoredTime(e.RecordedAt)
	e.Actor = StoredText(e.Actor)
	if e.Payload != nil {
		normalizeValue(reflect.ValueOf(e.Payload))
	}
}

var timeType = reflect.TypeFor[time.Time]()

// normalizeValue rewrites, in place, the times and strings reachable from
// v through pointers, struct fields and slices.
func normalizeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalizeValue(v.Elem())
		}
	case reflect.Struct:
		if v.Type() == timeType {
			if v.CanSet() {
				v.Set(reflect.ValueOf(StoredTime(v.Interface().(time.Time))))
			}
			return
		}
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				normalizeValue(f)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // raw JSON or bytes, not text
		}
		for i := range v.Len() {
			normalizeValue(v.Index(i))
		}
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); s != StoredText(s) {
				v.SetString(StoredText(s))
			}
		}
	}
}
