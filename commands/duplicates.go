package commands

import (
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/schema"
)

// A message ingested with a duplicate key (a sender's control id) is a
// possible duplicate of the latest earlier message of its source with the
// same key. The batch finds that one before it decides, under a
// transaction-level advisory lock on the source and key, so two ingests of
// one key, in one batch or in two processes, see each other in the order
// they commit.

// dupKey is a source and a duplicate key.
type dupKey struct{ source, key string }

// dupLookup is an ingest's question: the latest earlier message of its
// source and key, uuid.Nil when there is none.
type dupLookup struct {
	dupKey
	latest uuid.UUID
}

// dupKeys lists the duplicate keys of the ops, sorted, once each.
func dupKeys(ops []*op) []dupKey {
	var out []dupKey
	for _, o := range ops {
		if o.dup != nil {
			out = append(out, o.dup.dupKey)
		}
	}
	slices.SortFunc(out, func(a, b dupKey) int {
		if a.source != b.source {
			return compareStrings(a.source, b.source)
		}
		return compareStrings(a.key, b.key)
	})
	return slices.Compact(out)
}

// queueDuplicates queues the locks of the keys, in the order of their
// hash, and the read of the latest message of each; the function returned
// gives them once the batch is read.
func queueDuplicates(b *pgx.Batch, keys []dupKey) func() map[dupKey]uuid.UUID {
	latest := map[dupKey]uuid.UUID{}
	if len(keys) == 0 {
		return func() map[dupKey]uuid.UUID { return latest }
	}
	sources, names := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		sources[i], names[i] = k.source, k.key
	}
	b.Queue(`SELECT pg_advisory_xact_lock($3::int, h) FROM (
			SELECT DISTINCT hashtext(s || chr(31) || k) AS h FROM unnest($1::text[], $2::text[]) AS x(s, k)
			ORDER BY h OFFSET 0) l`, sources, names, int32(schema.ClassDuplicate))
	projection.QueueLatestDuplicates(b, sources, names, func(source, key string, id uuid.UUID) {
		latest[dupKey{source, key}] = id
	})
	return func() map[dupKey]uuid.UUID { return latest }
}
