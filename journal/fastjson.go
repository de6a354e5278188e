package journal

import (
	"encoding/json"
	"unicode/utf8"
)

// The audit and the rebuild decode every payload of the journal, and
// encoding/json, which reflects over each field, is most of their time. So
// the payloads of message and delivery events have a decoder of their own,
// decodeFast, that reads the plain JSON Encode writes and PostgreSQL gives
// back: an object whose keys are exactly the fields' names, each once, whose
// strings have no escapes and are valid UTF-8, whose integers have no
// fraction or exponent and whose values are never null (but an array's). It
// gives up on anything else, and Decode then uses encoding/json, which
// decides; so the fast decoder must never accept what encoding/json would
// read otherwise. For the values of types that decode themselves (times,
// ids, outcome kinds, refusals, durations) it calls the same methods
// encoding/json would. FuzzDecodeFast holds it to that.
//
// This file is the scanner. The decoders of the payloads, which repeat each
// payload's shape, are generated from the types into fastjson_gen.go
// (fastjson_gen_test.go), and a test checks that the file is current.

//go:generate go test -tags fastjsongen -run TestFastJSONGenerated -args -generate

// fastPayload is a payload with a fast decoder.
type fastPayload interface {
	Payload
	decodeFast(d *fastDecoder)
}

// decodeFast decodes data into p and reports whether it could. When it
// could not, p may be partly filled.
func decodeFast(p fastPayload, data []byte) bool {
	d := fastDecoder{data: data}
	p.decodeFast(&d)
	d.space()
	return !d.failed && d.i == len(d.data)
}

type fastDecoder struct {
	data   []byte
	i      int
	failed bool
}

// object is the state of one JSON object being read: the fields seen.
type object struct {
	seen uint32
	n    int
}

func (d *fastDecoder) fail() { d.failed = true }

func (d *fastDecoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, 0 at the end.
func (d *fastDecoder) next() byte {
	d.space()
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

// begin reads the opening brace of an object.
func (d *fastDecoder) begin() object {
	if d.next() != '{' {
		d.fail()
		return object{}
	}
	d.i++
	return object{}
}

// field reads the next key of the object o and its colon and returns the
// key's index in names; -1 after the closing brace, or on a failure: an
// unknown key, a key seen before, or anything but a key.
func (d *fastDecoder) field(o *object, names ...string) int {
	if d.failed {
		return -1
	}
	c := d.next()
	if c == '}' {
		d.i++
		return -1
	}
	if o.n > 0 {
		if c != ',' {
			d.fail()
			return -1
		}
		d.i++
		d.space()
	}
	key := d.rawString()
	if d.failed || d.next() != ':' {
		d.fail()
		return -1
	}
	d.i++
	for k, name := range names {
		if string(key) == name {
			if o.seen&(1<<k) != 0 {
				break
			}
			o.seen |= 1 << k
			o.n++
			return k
		}
	}
	d.fail()
	return -1
}

// rawString reads a string with no escapes and no control characters and
// returns what is between its quotes.
func (d *fastDecoder) rawString() []byte {
	if d.next() != '"' {
		d.fail()
		return nil
	}
	start := d.i + 1
	for j := start; j < len(d.data); j++ {
		switch c := d.data[j]; {
		case c == '"':
			d.i = j + 1
			return d.data[start:j]
		case c == '\\' || c < 0x20:
			d.fail()
			return nil
		}
	}
	d.fail()
	return nil
}

// text reads a string value that is valid UTF-8.
func (d *fastDecoder) text() []byte {
	s := d.rawString()
	if !d.failed && !utf8.Valid(s) {
		d.fail()
	}
	return s
}

func (d *fastDecoder) string(p *string) {
	if s := d.text(); !d.failed {
		*p = string(s)
	}
}

// unmarshalText reads a string into a type that decodes itself from text,
// as encoding/json does.
func (d *fastDecoder) unmarshalText(p interface{ UnmarshalText([]byte) error }) {
	if s := d.text(); !d.failed && p.UnmarshalText(s) != nil {
		d.fail()
	}
}

// unmarshalJSON reads a string into a type that decodes itself from JSON,
// handing it the string with its quotes, as encoding/json does.
func (d *fastDecoder) unmarshalJSON(p json.Unmarshaler) {
	d.space()
	begin := d.i
	if d.text(); !d.failed && p.UnmarshalJSON(d.data[begin:d.i]) != nil {
		d.fail()
	}
}

// integer reads an integer of at most 18 digits, with no fraction or
// exponent; anything longer is left to encoding/json.
func (d *fastDecoder) integer() int64 {
	d.space()
	j, neg := d.i, false
	if j < len(d.data) && d.data[j] == '-' {
		neg = true
		j++
	}
	start := j
	var n int64
	for j < len(d.data) && d.data[j] >= '0' && d.data[j] <= '9' {
		n = n*10 + int64(d.data[j]-'0')
		j++
	}
	digits := j - start
	switch {
	case digits == 0 || digits > 18 || (digits > 1 && d.data[start] == '0'):
		d.fail()
		return 0
	case j < len(d.data) && (d.data[j] == '.' || d.data[j] == 'e' || d.data[j] == 'E'):
		d.fail()
		return 0
	}
	d.i = j
	if neg {
		return -n
	}
	return n
}

func (d *fastDecoder) int(p *int) {
	if n := d.integer(); !d.failed {
		*p = int(n)
	}
}

func (d *fastDecoder) int64(p *int64) {
	if n := d.integer(); !d.failed {
		*p = n
	}
}

// null reads a null if one is next.
func (d *fastDecoder) null() bool {
	if d.next() != 'n' || len(d.data)-d.i < 4 || string(d.data[d.i:d.i+4]) != "null" {
		return false
	}
	d.i += 4
	return true
}

func (d *fastDecoder) bool(p *bool) {
	d.space()
	rest := d.data[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*p, d.i = true, d.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*p, d.i = false, d.i+5
	default:
		d.fail()
		return
	}
	// A literal runs into no letter or digit: "truex" is not true.
	if d.i < len(d.data) {
		if c := d.data[d.i]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			d.fail()
		}
	}
}

// stringMap reads an object of string values; null is nil, as encoding/json
// reads them. A key given twice keeps its last value, as there.
func (d *fastDecoder) stringMap(p *map[string]string) {
	if d.null() {
		*p = nil
		return
	}
	if d.next() != '{' {
		d.fail()
		return
	}
	d.i++
	m := map[string]string{}
	for i := 0; !d.failed; i++ {
		if d.next() == '}' {
			d.i++
			*p = m
			return
		}
		if i > 0 {
			if d.next() != ',' {
				d.fail()
				return
			}
			d.i++
		}
		key := d.text()
		if d.failed || d.next() != ':' {
			d.fail()
			return
		}
		d.i++
		var v string
		if d.string(&v); !d.failed {
			m[string(key)] = v
		}
	}
}

// decodeArray reads an array of values, each with elem; null is nil and []
// an empty slice, as encoding/json reads them.
func decodeArray[T any](d *fastDecoder, p *[]T, elem func(d *fastDecoder, e *T)) {
	if d.null() {
		*p = nil
		return
	}
	if d.next() != '[' {
		d.fail()
		return
	}
	d.i++
	*p = []T{}
	for i := 0; !d.failed; i++ {
		if d.next() == ']' {
			d.i++
			return
		}
		if i > 0 {
			if d.next() != ',' {
				d.fail()
				return
			}
			d.i++
		}
		var e T
		elem(d, &e)
		*p = append(*p, e)
	}
}

// decodePointer reads a value into *p with decode, allocating it when *p
// is nil; null is nil, as encoding/json reads it.
func decodePointer[T any](d *fastDecoder, p **T, decode func(d *fastDecoder, e *T)) {
	if d.null() {
		*p = nil
		return
	}
	if *p == nil {
		*p = new(T)
	}
	decode(d, *p)
}
