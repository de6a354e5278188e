package journal

import (
	"bytes"
	"testing"
)

// FuzzDecode holds Decode, the reader of every payload the journal gives
// back, to the encoder: what it accepts of any kind encodes, and decodes
// again to what encodes the same. FuzzDecodeFast holds the fast path to
// encoding/json.
func FuzzDecode(f *testing.F) {
	kinds := Kinds()
	index := map[Kind]uint8{}
	for i, k := range kinds {
		index[k] = uint8(i)
		f.Add(uint8(i), []byte(`{}`))
	}
	for _, p := range fastSamples() {
		data, err := Encode(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(index[p.Kind()], data)
		f.Add(index[p.Kind()], jsonbStyle(f, data))
	}
	f.Add(index[KindDeliveryStalled], []byte(`{"wake_ups":5,"reason":"<b>R&D</b>"}`))
	f.Add(index[KindMessageRefused], []byte(`{"refusal":"maybe","reason":"r"}`))
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		kind := kinds[int(k)%len(kinds)]
		p, err := Decode(kind, data)
		if err != nil {
			return
		}
		if p.Kind() != kind {
			t.Fatalf("%s decoded as a %s", kind, p.Kind())
		}
		enc, err := Encode(p)
		if err != nil {
			t.Fatalf("%s %s decodes to %+v, which does not encode: %v", kind, data, p, err)
		}
		again, err := Decode(kind, enc)
		if err != nil {
			t.Fatalf("%s %s encodes to %s, which does not decode: %v", kind, data, enc, err)
		}
		if enc2, err := Encode(again); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: %s decodes and encodes as %s, %v", kind, enc, enc2, err)
		}
		_ = p.Text()
	})
}
