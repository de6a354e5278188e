package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrLockLost is what Lock.Check and Lease.Check return (errors.Is) when
// the lock is no longer held: a session advisory lock lives exactly as
// long as its session, which a restart of PostgreSQL, a terminated
// backend or a failover ends. Once lost it stays lost, and whatever relied
// on it since it was taken may have been done beside another holder.
var ErrLockLost = errors.New("lock lost")

// lostError names the lock that was lost and why.
type lostError struct {
	lock, why string
	err       error
}

func (e *lostError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("the %s was lost: %s: %v", e.lock, e.why, e.err)
	}
	return fmt.Sprintf("the %s was lost: %s", e.lock, e.why)
}

func (e *lostError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrLockLost, e.err}
	}
	return []error{ErrLockLost}
}

// heldLock is an advisory lock of one key in the mode pg_locks names:
// ExclusiveLock for pg_advisory_lock, ShareLock for its shared form.
type heldLock struct {
	key  LockKey
	mode string
}

// holds checks on conn, in one round trip, that its session still holds
// every lock of want. It returns a lostError naming lock when the session
// has ended or lacks one, and ctx's error when ctx ended first.
func holds(ctx context.Context, conn *pgxpool.Conn, lock string, want ...heldLock) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if conn == nil {
		return &lostError{lock: lock, why: "it is not held"}
	}
	keys, modes := make([]int64, len(want)), make([]string, len(want))
	for i, w := range want {
		keys[i], modes[i] = int64(w.key), w.mode
	}
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN unnest($1::bigint[], $2::text[]) AS w(key, mode)
		ON l.classid = (w.key >> 32)::text::oid AND l.objid = (w.key & x'ffffffff'::bigint)::text::oid AND l.mode = w.mode
		WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1`, keys, modes).Scan(&n)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &lostError{lock: lock, why: "its PostgreSQL session ended", err: err}
	}
	if n != len(want) {
		return &lostError{lock: lock, why: fmt.Sprintf("its PostgreSQL session (backend %d) no longer holds it", conn.Conn().PgConn().PID())}
	}
	return nil
}

// Check confirms, with one query on the lock's own connection, that its
// session still holds it (and the server lock shared beside it, as
// LockOnline takes it); otherwise it returns an error that matches
// ErrLockLost. Work that relies on the lock checks it before each commit.
func (l *Lock) Check(ctx context.Context) error {
	name, key := "server lock", KeyServer
	if l.key != 0 {
		key = l.key
		if key == KeyOnlineRebuild {
			name = "online rebuild lock"
		}
	}
	want := []heldLock{{key, "ExclusiveLock"}}
	if l.shared {
		want = append(want, heldLock{KeyServer, "ShareLock"})
	}
	return holds(ctx, l.conn, name, want...)
}

// Check confirms, with one query on the lease's connection, that this
// process still holds the lease it took; otherwise (its session ended, or
// it was never taken) it returns an error that matches ErrLockLost. Unlike
// Take it never takes the lease again: work that must not have been
// without it since it was taken checks it before each commit.
func (l *Lease) Check(ctx context.Context) error {
	return holds(ctx, l.conn, l.loop+" lease", heldLock{l.key, "ExclusiveLock"})
}
