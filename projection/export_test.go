package projection

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
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

// UpdateMessagesSQL, DeleteLanesSQL, LockSQL, LockMessagesSQL and
// LoadManySQL are statements of the Writer's transactions, which run
// under LookupPlanSQL.
const DeleteLanesSQL, LockMessagesSQL = deleteLanesSQL, lockMessagesSQL

var UpdateMessagesSQL, LockSQL, LoadManySQL = updateMessagesSQL, lockSQL, loadManySQL

// ExpiredSQL and ClaimHeldSQL read the claims held.
var ExpiredSQL, ClaimHeldSQL = expiredSQL, claimHeldSQL

// ReadDue runs the count of QueueDue at now reading at most exact entries
// of deliveries_due on each side of now.
func ReadDue(ctx context.Context, db *pgxpool.Pool, now time.Time, exact int) (int64, time.Time, error) {
	var (
		n      int64
		oldest pgtype.Timestamptz
	)
	err := db.QueryRow(ctx, dueSQL, now, exact).Scan(&n, &oldest)
	return n, timeOf(oldest), err
}

// Overdue is how long before now due was, as ReadStats gives it: the
// database keeps microseconds.
func Overdue(now, due time.Time) time.Duration { return overdue(now.Truncate(time.Microsecond), due) }

// Share is a share of the tables' check (shareIDs).
type Share struct {
	// Where selects the share's messages, m, with Args.
	Where string
	Args  []any
	Holds func(uuid.UUID) bool
}

// ShareIDs are the n shares of the tables' check.
func ShareIDs(n int) []Share {
	var out []Share
	for _, sh := range shareIDs(n) {
		out = append(out, Share{Where: sh.messages, Args: sh.args, Holds: sh.holds})
	}
	return out
}

// ListSQL is the query of a page of ListMessages, for its plan's test.
func ListSQL(f MessageFilter) (string, []any) {
	sql, args, _ := listSQL(f)
	return sql, args
}

// HeldKeysSQL reads the messages holding a source's idempotency keys.
const HeldKeysSQL = heldKeysSQL
