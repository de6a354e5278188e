package projection

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/schema"
)

// Rebuild recreates the messages and deliveries tables from the journal
// alone: it folds the whole journal in memory (read as Audit reads it),
// replaces the tables in one transaction (created bare, loaded with COPY,
// then given their keys and indexes), then audits the result (the fold has
// checked every event; the tables are compared with it). It holds the
// server lock alone throughout, so it refuses while any server runs
// (schema.ErrDatabaseInUse). An event the fold refuses is reported and left
// out, as the audit does.
func Rebuild(ctx context.Context, db *pgxpool.Pool) (*Report, error) {
	return rebuild(ctx, db, defaultReading)
}

func rebuild(ctx context.Context, db *pgxpool.Pool, rd reading) (*Report, error) {
	lock, err := schema.LockExclusive(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	defer lock.Release()
	s, err := openSnapshot(ctx, db, rd.connections)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	f, err := foldSnapshot(ctx, s, rd)
	s.close()
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	err = schema.RecreateProjections(ctx, db, func(tx pgx.Tx) error { return copyFolded(ctx, tx, f, nil) })
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if s, err = openSnapshot(ctx, db, rd.connections); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	defer s.close()
	r, err := checkTables(ctx, s.queriers(), f, uuid.Nil)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	return r, nil
}
