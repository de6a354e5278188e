package dbtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/schema"
)

// TerminateHolder ends the PostgreSQL backend that holds key alone in db's
// database, as a restart of PostgreSQL or a failover would end it, and
// waits until the server has dropped the locks of that session. It fails
// the test unless exactly one backend held key.
func TerminateHolder(t testing.TB, db *pgxpool.Pool, key schema.LockKey) {
	t.Helper()
	const holders = `FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND mode = 'ExclusiveLock'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = ($1::bigint >> 32)::text::oid AND objid = ($1::bigint & x'ffffffff'::bigint)::text::oid`
	var n int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) `+holders, int64(key)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("dbtest: terminate the holder of lock %#x: %d terminated, %v", key, n, err)
	}
	testpoll.Until(t, "the terminated backend's locks dropped", func() bool {
		var held bool
		if err := db.QueryRow(t.Context(), `SELECT EXISTS (SELECT `+holders+`)`, int64(key)).Scan(&held); err != nil {
			t.Fatalf("dbtest: %v", err)
		}
		return !held
	})
}
