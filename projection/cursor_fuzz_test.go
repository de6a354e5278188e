package projection

import (
	"math"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// FuzzCursors reads text as each cursor of the lists (messages,
// operations, an operation's refusals, a target's lanes): what a parser
// accepts is written back by its String to the same cursor, and every
// cursor String writes of what a list holds (a created_at of the years 1
// to 9999, a version that fits 32 bits, an ordering key) is read back,
// and any other refused.
func FuzzCursors(f *testing.F) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 123000, time.UTC)
	id := uuid.MustParse("0194a2b1-0000-7000-8000-000000000001")
	f.Add(Cursor{CreatedAt: at, ID: id}.String(), at.UnixMicro(), id[:], 3, 2, "customer-7")
	f.Add(OperationCursor{CreatedAt: at, ID: id}.String(), int64(-1), id[:], 1, 1, "a")
	f.Add(RefusalAt{Version: 12, N: 40}.String(), int64(0), []byte{}, 0, -1, "")
	f.Add(LaneCursor("customer/7 ü"), int64(1)<<62, []byte("short"), 1<<40, 1, "x")
	f.Add("bTE6MTpub3QtYS11dWlk", int64(5), id[:], 1, 2, "\x00")
	f.Add("_w", int64(math.MinInt64), id[:], math.MaxInt32+1, 1, "\xff")
	f.Fuzz(func(t *testing.T, s string, micros int64, idBytes []byte, version, n int, key string) {
		if c, err := ParseCursor(s); err == nil {
			if back, err := ParseCursor(c.String()); err != nil || !back.CreatedAt.Equal(c.CreatedAt) || back.ID != c.ID {
				t.Fatalf("cursor %q: %+v read back as %+v, %v", s, c, back, err)
			}
		}
		if c, err := ParseOperationCursor(s); err == nil {
			if back, err := ParseOperationCursor(c.String()); err != nil || !back.CreatedAt.Equal(c.CreatedAt) || back.ID != c.ID {
				t.Fatalf("operation cursor %q: %+v read back as %+v, %v", s, c, back, err)
			}
			if _, err := ParseCursor(s); err == nil {
				t.Fatalf("%q is a cursor of both lists", s)
			}
		}
		if a, err := ParseRefusalAt(s); err == nil {
			if a.Version < 1 || a.Version > math.MaxInt32 || a.N < 1 {
				t.Fatalf("refusal place %q accepted as %d.%d", s, a.Version, a.N)
			}
			if back, err := ParseRefusalAt(a.String()); err != nil || back != a {
				t.Fatalf("refusal place %q read back as %+v, %v", s, back, err)
			}
		}
		if k, err := ParseLaneCursor(s); err == nil {
			// base64 leaves a last character's low bits free: another
			// spelling of a cursor names the same key.
			if back, err := ParseLaneCursor(LaneCursor(k)); k == "" || lifecycle.CheckOrderingKey("key", k) != nil || err != nil || back != k {
				t.Fatalf("lane cursor %q read as %q, written back as %q, %v", s, k, back, err)
			}
		}

		at := time.UnixMicro(micros).UTC()
		held := at.Year() >= 1 && at.Year() <= 9999
		var id uuid.UUID
		copy(id[:], idBytes)
		if back, err := ParseCursor(Cursor{CreatedAt: at, ID: id}.String()); (err == nil) != held || held && (!back.CreatedAt.Equal(at) || back.ID != id) {
			t.Fatalf("cursor at %s, %s read back as %+v, %v", at, id, back, err)
		}
		if back, err := ParseOperationCursor(OperationCursor{CreatedAt: at, ID: id}.String()); (err == nil) != held || held && (!back.CreatedAt.Equal(at) || back.ID != id) {
			t.Fatalf("operation cursor at %s, %s read back as %+v, %v", at, id, back, err)
		}
		if version >= 1 && n >= 1 {
			a := RefusalAt{Version: version, N: n}
			if back, err := ParseRefusalAt(a.String()); (err == nil) != (version <= math.MaxInt32) || err == nil && back != a {
				t.Fatalf("refusal place %+v read back as %+v, %v", a, back, err)
			}
		}
		if key != "" {
			held := lifecycle.CheckOrderingKey("key", key) == nil
			if back, err := ParseLaneCursor(LaneCursor(key)); (err == nil) != held || held && back != key {
				t.Fatalf("lane cursor of %q read back as %q, %v", key, back, err)
			}
		}
	})
}
