package targets

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/internal/seal"
)

// This file holds every statement on target_keys, the table of every
// signing key: a target's, and Waybill's own for the callbacks and the
// alert webhook.

// MaxLiveKeys bounds the keys of one owner that sign at once, so a
// header never carries more signatures than a receiver will try.
const MaxLiveKeys = 10

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// sealContext binds a sealed secret to its row.
func sealContext(owner, keyID string) []byte { return []byte(owner + "\x00" + keyID) }

// QueueInsertKey adds to b the insert of an owner's key (a target's name
// or a reserved owner, lifecycle.KeyOwners), its secret sealed with box.
func QueueInsertKey(b *pgx.Batch, box *seal.Box, owner string, k Key) {
	b.Queue(`INSERT INTO target_keys (target, key_id, scheme, secret, public, fingerprint, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		owner, k.ID, k.Scheme, box.Seal(k.Secret, sealContext(owner, k.ID)), k.Public, k.Fingerprint(), k.CreatedAt, nullTime(k.ExpiresAt))
}

// QueueEndKey adds to b the end of an owner's key: it signs until end.
func QueueEndKey(b *pgx.Batch, owner, keyID string, end time.Time) {
	b.Queue(`UPDATE target_keys SET expires_at = $3 WHERE target = $1 AND key_id = $2`, owner, keyID, end)
}

// QueueDeleteKeys adds to b the deletion of a deleted target's keys.
func QueueDeleteKeys(b *pgx.Batch, target string) {
	b.Queue(`DELETE FROM target_keys WHERE target = $1`, target)
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// LoadKeys reads an owner's keys that have not expired at now, oldest
// first, their secrets opened with box; seal.ErrKeyMismatch when box
// cannot open one.
func LoadKeys(ctx context.Context, q Querier, box *seal.Box, owner string, now time.Time) ([]Key, error) {
	rows, err := q.Query(ctx, `SELECT key_id, scheme, secret, public, created_at, expires_at FROM target_keys
		WHERE target = $1 AND (expires_at IS NULL OR expires_at > $2) ORDER BY created_at, key_id`, owner, now)
	if err != nil {
		return nil, fmt.Errorf("load keys of %s: %w", owner, err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) {
		var k Key
		var sealed []byte
		var expires *time.Time
		if err := row.Scan(&k.ID, &k.Scheme, &sealed, &k.Public, &k.CreatedAt, &expires); err != nil {
			return k, err
		}
		if expires != nil {
			k.ExpiresAt = *expires
		}
		k.Secret, err = box.Open(sealed, sealContext(owner, k.ID))
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("load keys of %s: %w", owner, err)
	}
	return keys, nil
}

// KeyRecord is what the journal records of a stored key.
type KeyRecord struct {
	// Owner is a target's name or a reserved owner.
	Owner, ID, Scheme, Fingerprint string
	// ExpiresAt is when the key stops signing; zero: never.
	ExpiresAt time.Time
}

// Same reports whether r and o record the same key and end.
func (r KeyRecord) Same(o KeyRecord) bool {
	return r.Owner == o.Owner && r.ID == o.ID && r.Scheme == o.Scheme && r.Fingerprint == o.Fingerprint &&
		r.ExpiresAt.Equal(o.ExpiresAt)
}

// KeyRecords reads every stored key's record, for the audit; no secret
// is read.
func KeyRecords(ctx context.Context, q Querier) ([]KeyRecord, error) {
	rows, err := q.Query(ctx, `SELECT target, key_id, scheme, fingerprint, expires_at FROM target_keys ORDER BY target, key_id`)
	if err != nil {
		return nil, fmt.Errorf("read signing keys: %w", err)
	}
	records, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (KeyRecord, error) {
		var r KeyRecord
		var expires *time.Time
		err := row.Scan(&r.Owner, &r.ID, &r.Scheme, &r.Fingerprint, &expires)
		if expires != nil {
			r.ExpiresAt = *expires
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read signing keys: %w", err)
	}
	return records, nil
}
