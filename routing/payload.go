package routing

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"

	"github.com/waybill/waybill/lifecycle"
)

// decodeJSON is the JSON text data, which json.Valid has accepted, as an
// expression reads it: an object as a map[string]any, an array as an
// []any, a string, a bool or nil as encoding/json decodes them, and a
// number as a double when it is exactly one (number). What cannot be read
// exactly is an error to read, where it is, so the rest is read as usual:
// a number no double holds, and the value of a key an object gives more
// than once, which a receiver may read otherwise.
func decodeJSON(data []byte) any {
	d := decoder{data: data}
	return d.value()
}

// decoder reads a JSON text json.Valid has accepted, so it meets nothing
// it need refuse.
type decoder struct {
	data []byte
	i    int
}

func (d *decoder) value() any {
	d.space()
	switch d.data[d.i] {
	case '{':
		m := map[string]any{}
		for d.i++; d.space() != '}'; {
			k := d.string()
			d.space()
			d.i++ // :
			v := d.value()
			if _, ok := m[k]; ok {
				v = types.NewErr("the key %q is given more than once", lifecycle.Cut(k, 40))
			}
			m[k] = v
			if d.space() == ',' {
				d.i++
			}
		}
		d.i++
		return m
	case '[':
		l := []any{}
		for d.i++; d.space() != ']'; {
			l = append(l, d.value())
			if d.space() == ',' {
				d.i++
			}
		}
		d.i++
		return l
	case '"':
		return d.string()
	case 't':
		d.i += len("true")
		return true
	case 'f':
		d.i += len("false")
		return false
	case 'n':
		d.i += len("null")
		return nil
	}
	start := d.i
	for d.i < len(d.data) && strings.IndexByte("+-.eE0123456789", d.data[d.i]) >= 0 {
		d.i++
	}
	return number(string(d.data[start:d.i]))
}

// space passes white space and returns the byte after it.
func (d *decoder) space() byte {
	for d.data[d.i] == ' ' || d.data[d.i] == '\t' || d.data[d.i] == '\n' || d.data[d.i] == '\r' {
		d.i++
	}
	return d.data[d.i]
}

// string reads a string as encoding/json does: escapes decoded, and
// bytes that are not UTF-8 each replaced by U+FFFD.
func (d *decoder) string() string {
	start := d.i
	plain := true
	for d.i++; d.data[d.i] != '"'; d.i++ {
		switch c := d.data[d.i]; {
		case c == '\\':
			plain = false
			d.i++
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	d.i++
	if plain {
		return string(d.data[start+1 : d.i-1])
	}
	var s string
	_ = json.Unmarshal(d.data[start:d.i], &s) // a valid string always decodes
	return s
}

// number is a JSON number as a double, as CEL reads JSON, when the double
// is the number: its shortest form, which a transform writes back, has the
// same digits. Any other (more digits than a double keeps, or past its
// range) is an error to read: rounded, an id of 19 digits would match
// another's, or be sent on changed, without a word.
func number(text string) any {
	if f, err := strconv.ParseFloat(text, 64); err == nil && exact(text, f) {
		return f
	}
	return types.NewErr("the number %s is not exactly a double", lifecycle.Cut(text, 40))
}

// exact reports whether f, the double nearest the number text, is that
// number: written in its shortest form, it has the same digits.
func exact(text string, f float64) bool {
	digits, exp, ok := decimal(text)
	switch {
	case !ok:
		return false
	case digits == "":
		return true // zero, whatever its exponent
	case f == 0 || math.IsInf(f, 0):
		return false
	case len(digits) <= 15 && math.Abs(f) >= 0x1p-1022:
		// A decimal of up to 15 digits comes back from the normal double
		// nearest it (DBL_DIG), and so is its shortest form.
		return true
	}
	shortest, shortestExp, _ := decimal(strconv.FormatFloat(f, 'e', -1, 64))
	return digits == shortest && exp == shortestExp
}

// decimal is a number's text as its significant digits, without the zeros
// that lead or trail, and the power of ten of the first; "" for zero. ok
// is false when the exponent is past what an int holds.
func decimal(text string) (digits string, exp int, ok bool) {
	text = strings.TrimPrefix(text, "-")
	mantissa, power, _ := strings.Cut(strings.ToLower(text), "e")
	whole, fraction, _ := strings.Cut(mantissa, ".")
	digits = strings.TrimRight(strings.TrimLeft(whole+fraction, "0"), "0")
	if digits == "" {
		return "", 0, true
	}
	exp = len(whole) - (len(whole+fraction) - len(strings.TrimLeft(whole+fraction, "0")))
	if power != "" {
		p, err := strconv.Atoi(power)
		if err != nil {
			return "", 0, false
		}
		exp += p
	}
	return digits, exp, true
}
