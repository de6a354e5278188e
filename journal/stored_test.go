package journal_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/waybill/waybill/journal"
)

func TestStoredTime(t *testing.T) {
	loc := time.FixedZone("UTC+2", 2*3600)
	for _, tt := range []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"zero stays zero", time.Time{}, time.Time{}},
		{"nanoseconds cut", time.Date(2026, 3, 1, 8, 53, 47, 45916369, time.UTC), time.Date(2026, 3, 1, 8, 53, 47, 45916000, time.UTC)},
		{"put in UTC", time.Date(2026, 3, 1, 10, 0, 0, 1000, loc), time.Date(2026, 3, 1, 8, 0, 0, 1000, time.UTC)},
		{"monotonic reading dropped", time.Now().Round(time.Second), time.Now().Round(time.Second).Round(0).UTC()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := journal.StoredTime(tt.in)
			if !got.Equal(tt.want) || got != got.Round(0) || (!got.IsZero() && got.Location() != time.UTC) {
				t.Errorf("StoredTime(%v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestStoredText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"é and 日本", "é and 日本"},
		{"nul\x00here", "nul\uFFFDhere"},
		{"bad \xff\xfe bytes", "bad \uFFFD bytes"},
		{"cut \xe6\x97", "cut \uFFFD"},
	} {
		if got := journal.StoredText(tt.in); got != tt.want {
			t.Errorf("StoredText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestNormalizeReachesEveryField sets every time and string that any
// payload of the catalogue holds to a value the database would not keep as
// it is, and checks that Normalize leaves none of them so: a new payload
// type or field needs nothing of its own.
func TestNormalizeReachesEveryField(t *testing.T) {
	raw := time.Date(2026, 3, 1, 8, 53, 47, 45916369, time.FixedZone("X", 3600))
	const text = "a\x00b\xff"
	for _, kind := range journal.Kinds() {
		p := journal.NewPayload(kind)
		n := fill(reflect.ValueOf(p), raw, text)
		e := journal.Event{RecordedAt: raw, Actor: text, Payload: p}
		journal.Normalize(&e)
		if e.RecordedAt != journal.StoredTime(raw) || e.Actor != journal.StoredText(text) {
			t.Errorf("%s: envelope not normalized: %v %q", kind, e.RecordedAt, e.Actor)
		}
		if bad := unstored(reflect.ValueOf(p)); bad != "" {
			t.Errorf("%s: %s is not as stored after Normalize (%d fields filled)", kind, bad, n)
		}
	}
}

// fill sets every settable time and string reachable from v, growing each
// slice of structs to one element, and returns how many it set.
func fill(v reflect.Value, at time.Time, s string) int {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			if !v.CanSet() {
				return 0
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		return fill(v.Elem(), at, s)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(at))
			return 1
		}
		n := 0
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				n += fill(f, at, s)
			}
		}
		return n
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 0
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		return fill(v.Index(0), at, s)
	case reflect.String:
		v.SetString(s)
		return 1
	}
	return 0
}

// unstored names the first time or string reachable from v that the
// database would not keep as it is, or returns "".
func unstored(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			return unstored(v.Elem())
		}
	case reflect.Struct:
		if tm, ok := v.Interface().(time.Time); ok {
			if tm != journal.StoredTime(tm) {
				return "a time"
			}
			return ""
		}
		for i := range v.NumField() {
			if bad := unstored(v.Field(i)); bad != "" {
				return v.Type().Field(i).Name + ": " + bad
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if bad := unstored(v.Index(i)); bad != "" {
				return bad
			}
		}
	case reflect.String:
		if s := v.String(); s != journal.StoredText(s) {
			return "a string"
		}
	}
	return ""
}
