package targets

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/internal/seal"
)

// This file holds every statement on target_keys.

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// sealContext binds a sealed secret to its row.
func sealContext(target, keyID string) []byte { return []byte(target + "\x00" + keyID) }

// QueueInsertKey adds to b the insert of a target's key, its secret
// sealed with box; the target's row must be written before it.
func QueueInsertKey(b *pgx.Batch, box *seal.Box, target string, k Key) {
	var expires *time.Time
	if !k.ExpiresAt.IsZero() {
		expires = &k.ExpiresAt
	}
	b.Queue(`INSERT INTO target_keys (target, key_id, scheme, secret, public, fingerprint, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		target, k.ID, k.Scheme, box.Seal(k.Secret, sealContext(target, k.ID)), k.Public, k.Fingerprint(), k.CreatedAt, expires)
}

// LoadKeys reads a target's keys that have not expired at now, oldest
// first, their secrets opened with box; seal.ErrKeyMismatch when box
// cannot open one.
func LoadKeys(ctx context.Context, q Querier, box *seal.Box, target string, now time.Time) ([]Key, error) {
	rows, err := q.Query(ctx, `SELECT key_id, scheme, secret, public, created_at, expires_at FROM target_keys
		WHERE target = $1 AND (expires_at IS NULL OR expires_at > $2) ORDER BY created_at, key_id`, target, now)
	if err != nil {
		return nil, fmt.Errorf("load keys of target %s: %w", target, err)
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
		k.Secret, err = box.Open(sealed, sealContext(target, k.ID))
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("load keys of target %s: %w", target, err)
	}
	return keys, nil
}

// KeyRecord is what the journal records of a stored key.
type KeyRecord struct {
	Target, ID, Scheme, Fingerprint string
}

// KeyRecords reads every stored key's record, for the audit; no secret
// is read.
func KeyRecords(ctx context.Context, q Querier) ([]KeyRecord, error) {
	rows, err := q.Query(ctx, `SELECT target, key_id, scheme, fingerprint FROM target_keys ORDER BY target, key_id`)
	if err != nil {
		return nil, fmt.Errorf("read target keys: %w", err)
	}
	records, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (KeyRecord, error) {
		var r KeyRecord
		return r, row.Scan(&r.Target, &r.ID, &r.Scheme, &r.Fingerprint)
	})
	if err != nil {
		return nil, fmt.Errorf("read target keys: %w", err)
	}
	return records, nil
}
