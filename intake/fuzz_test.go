package intake

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/sources"
)

// FuzzInboxRow reads a row of an inbox table, whose writer Waybill does
// not control, as the poller does: a row it takes is a message the Writer
// accepts, within the payload's limit, keyed by its id; one it refuses
// says which row and why.
func FuzzInboxRow(f *testing.F) {
	f.Add(int64(4), []byte(`{"order":4}`), false, "acme", true, "globex", true, "customer-7", true)
	f.Add(int64(1), []byte{}, false, "acme", true, "globex", true, "", false)
	f.Add(int64(9), []byte(nil), true, "", false, "b c", true, "", true)
	f.Add(int64(-3), []byte("x"), false, strings.Repeat("p", 300), true, "to\x00", true, "key\n", true)
	f.Add(int64(1)<<62, []byte(strings.Repeat("y", 70)), false, "Ünïcødé ✓", true, "\xff", true, strings.Repeat("k", 201), true)
	p := &inbox{name: "up", maxPayload: 64, cfg: sources.InboxConfig{FromColumn: "sender", ToColumn: "receiver",
		OrderingKeyColumn: "ordering_key", ContentType: "application/json"}}
	f.Fuzz(func(t *testing.T, id int64, payload []byte, null bool, from string, fromValid bool, to string, toValid bool,
		ordering string, orderingValid bool) {
		r := row{id: id, payload: payload, null: null, from: pgtype.Text{String: from, Valid: fromValid},
			to: pgtype.Text{String: to, Valid: toValid}, ordering: pgtype.Text{String: ordering, Valid: orderingValid}}
		in, err := p.message(r)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "row ") {
				t.Fatalf("refusal %q does not name the row", err)
			}
			return
		}
		if null || int64(len(payload)) > p.maxPayload || !fromValid || !toValid {
			t.Fatalf("row %+v taken", r)
		}
		if in.IdempotencyKey != RowKey(id) || in.Row == nil || in.Row.ID != id || in.Row.Source != p.name || in.Source != p.name {
			t.Fatalf("row %d taken as %+v", id, in)
		}
		sum := sha256.Sum256(in.Payload)
		accepted := journal.MessageAccepted{Source: in.Source, From: in.From, To: in.To, ContentType: in.ContentType,
			PayloadSize: int64(len(in.Payload)), PayloadSHA256: hex.EncodeToString(sum[:]), IdempotencyKey: in.IdempotencyKey,
			OrderingKey: in.OrderingKey}
		if err := accepted.Validate(); err != nil {
			t.Fatalf("row %+v taken as a message the Writer refuses: %v", r, err)
		}
	})
}

// FuzzDirectoryName holds the directory poller to what it does with a
// file's name, which whoever writes into the directory chooses: it takes
// no hidden file (its own .processing folder among them) and only what
// the pattern matches, and a file's key names the file: another name,
// size, time or content is another key.
func FuzzDirectoryName(f *testing.F) {
	f.Add("*.xml", "order-4.xml", "order-5.xml", int64(11), int64(1764576000000000000))
	f.Add("*", ".processing", "error", int64(0), int64(0))
	f.Add("[a-", "a", "a.reason", int64(-1), int64(-1))
	f.Add("order-??.csv", "order-01.csv", "order-01.csv.0194a2b1-0000-7000-8000-000000000001", int64(1)<<40, int64(1))
	f.Add("*", "..", "ü\\x", int64(3), int64(4))
	f.Fuzz(func(t *testing.T, pattern, name, other string, size, mtime int64) {
		if takes(pattern, name) {
			if strings.HasPrefix(name, ".") {
				t.Fatalf("hidden %q taken", name)
			}
			if ok, err := filepath.Match(pattern, name); !ok || err != nil {
				t.Fatalf("%q taken by pattern %q, which does not match it", name, pattern)
			}
		}
		if takes(pattern, sources.ProcessingFolder) {
			t.Fatalf("pattern %q takes the processing folder", pattern)
		}
		at := time.Unix(0, mtime)
		data := []byte(other)
		key := FileKey(name, size, at, data)
		if len(key) != len("file:")+64 || !strings.HasPrefix(key, "file:") {
			t.Fatalf("key %q", key)
		}
		if FileKey(name, size, at, data) != key {
			t.Fatal("a file's key changes")
		}
		// A name never holds a NUL, which separates the key's parts.
		if other != name && !strings.ContainsRune(name+other, 0) && FileKey(other, size, at, data) == key {
			t.Fatalf("%q and %q have one key", name, other)
		}
		if FileKey(name, size+1, at, data) == key || FileKey(name, size, at.Add(1), data) == key ||
			FileKey(name, size, at, append(data, 0)) == key {
			t.Fatal("another file of the name has its key")
		}
	})
}
