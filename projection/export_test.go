package projection

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AuditReading is Audit of the whole journal read on connections at once
// in runs of chunk positions; snapshotTaken, when set, runs once every
// connection has the snapshot.
func AuditReading(ctx context.Context, db *pgxpool.Pool, connections int, chunk int64, snapshotTaken func()) (*Report, error) {
	return audit(ctx, db, uuid.Nil, reading{connections: connections, chunk: chunk, snapshotTaken: snapshotTaken})
}

// RebuildReading is Rebuild reading the journal as AuditReading does.
func RebuildReading(ctx context.Context, db *pgxpool.Pool, connections int, chunk int64) (*Report, error) {
	return rebuild(ctx, db, reading{connections: connections, chunk: chunk})
}

// UpdateMessagesSQL, DeleteLanesSQL, LockSQL and LoadManySQL are
// statements of the Writer's transactions, which run under LookupPlanSQL.
const UpdateMessagesSQL, DeleteLanesSQL = updateMessagesSQL, deleteLanesSQL

var LockSQL, LoadManySQL = lockSQL, loadManySQL
