package schema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverLock is the advisory lock that tells servers and rebuilds apart:
// every server holds it shared for as long as it runs; a rebuild needs it
// alone.
const serverLock = 0x77617962696c6c02

// ErrDatabaseInUse is returned when the lock is held the other way: a rebuild
// while a server runs, or a server while a rebuild runs.
var ErrDatabaseInUse = errors.New("database in use")

// Lock is a held advisory lock; it lives as long as its connection.
type Lock struct {
	conn   *pgxpool.Conn
	unlock string
}

// LockServer takes the server lock shared, as every running server does.
// It fails with ErrDatabaseInUse while a rebuild holds it.
func LockServer(ctx context.Context, db *pgxpool.Pool) (*Lock, error) {
	return lock(ctx, db, `SELECT pg_try_advisory_lock_shared($1)`, `SELECT pg_advisory_unlock_shared($1)`,
		"a rebuild is running on this database; start the server when it has finished")
}

// LockExclusive takes the server lock alone, for a rebuild or a reset.
// It fails with ErrDatabaseInUse while any server runs on the database.
func LockExclusive(ctx context.Context, db *pgxpool.Pool) (*Lock, error) {
	return lock(ctx, db, `SELECT pg_try_advisory_lock($1)`, `SELECT pg_advisory_unlock($1)`,
		"a Waybill server is running on this database: stop it first (Ctrl-C where `waybill serve` runs, or send its process SIGTERM; every one, when several share the database), then run this again")
}

func lock(ctx context.Context, db *pgxpool.Pool, sql, unlock, inUse string) (*Lock, error) {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock database: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, sql, int64(serverLock)).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("lock database: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, fmt.Errorf("%w: %s", ErrDatabaseInUse, inUse)
	}
	return &Lock{conn: conn, unlock: unlock}, nil
}

// Release gives the lock up; safe to call twice.
func (l *Lock) Release() {
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.conn.Exec(ctx, l.unlock, int64(serverLock)); err != nil {
		// Ending the session drops every advisory lock it holds.
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
	l.conn = nil
}
