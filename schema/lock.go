package schema

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// LockKey is an advisory-lock key of a single bigint. Every key Waybill
// takes is declared in the block below, so two parts never share one by
// mistake (TestLockKeysDistinct holds them apart).
type LockKey int64

// The advisory-lock keys: "waybill" in ASCII and a byte of its own each.
const (
	// KeyEnsure serialises schema.Ensure across processes starting at once.
	KeyEnsure LockKey = 0x77617962696c6c01
	// KeyServer is held shared by every running server and alone by a
	// rebuild or a reset.
	KeyServer LockKey = 0x77617962696c6c02
	// KeyFeedInit serialises the feed's creation of its offsets table.
	KeyFeedInit LockKey = 0x77617962696c6c03
	// KeyAlertsNATS and KeyAlertsWebhook are the leases of the alerts'
	// send loops, one per channel.
	KeyAlertsNATS    LockKey = 0x77617962696c6c10
	KeyAlertsWebhook LockKey = 0x77617962696c6c11
	// KeyAdminToken serialises the creation of the first admin token.
	KeyAdminToken LockKey = 0x77617962696c6c20
	// KeyRetention is the lease of a retention pass.
	KeyRetention LockKey = 0x77617962696c6c30
	// KeyBulk is the lease of the bulk operations' runner.
	KeyBulk LockKey = 0x77617962696c6c31
	// KeyOnlineRebuild is held alone by an online rebuild, which also
	// holds KeyServer shared, as a server does.
	KeyOnlineRebuild LockKey = 0x77617962696c6c40
)

// LockClass is the first key of an advisory lock of two int keys, whose
// second key is a hash of what it locks. PostgreSQL keeps the two-key
// locks apart from the one-key ones, so classes only differ among
// themselves.
type LockClass int32

// The classes of two-key advisory locks.
const (
	// ClassLane locks a fifo target's lane ("waln").
	ClassLane LockClass = 0x77616c6e
	// ClassDuplicate locks a source's duplicate key ("wdup").
	ClassDuplicate LockClass = 0x77647570
	// ClassTarget orders a target's claims and its disabling ("wtgt"):
	// a transaction that writes claims holds it shared, one that disables
	// the target alone.
	ClassTarget LockClass = 0x77746774
)

// ErrDatabaseInUse is returned when the lock is held the other way: a rebuild
// while a server runs, or a server while a rebuild runs.
var ErrDatabaseInUse = errors.New("database in use")

// ErrRebuildRunning is returned when an online rebuild already runs on the
// database.
var ErrRebuildRunning = errors.New("an online rebuild is running")

// Lock is an advisory lock held alone; it lives as long as its connection.
type Lock struct {
	conn *pgxpool.Conn
	// key is the lock, KeyServer unless set; shared says the server lock
	// is held shared beside it.
	key    LockKey
	shared bool
}

// ServerAfterConnect is a server's pool's AfterConnect: AfterConnect, and
// the server lock taken shared for as long as the connection lives. So no
// connection of a server opens while a rebuild or a reset holds the lock
// alone (it fails with ErrDatabaseInUse), and none can take it alone while
// any connection of a server is open: a server that loses a session (to a
// restart of PostgreSQL, a failover, a dropped connection) has lost no
// lock that its other connections, and its next ones, do not hold.
func ServerAfterConnect(ctx context.Context, conn *pgx.Conn) error {
	if err := AfterConnect(ctx, conn); err != nil {
		return err
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock_shared($1)`, int64(KeyServer)).Scan(&ok); err != nil {
		return fmt.Errorf("lock database: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: a rebuild or a reset is running on this database; start the server when it has finished", ErrDatabaseInUse)
	}
	return nil
}

// ReleaseServer gives up the server lock that the idle connections of a
// server's pool hold (ServerAfterConnect), and closes them, before the
// pool closes: a backend gives its locks up only as it ends, a moment
// after its client has gone, and a rebuild run the moment the server
// stopped would find them held still. Call it once the server's work has
// stopped, so that every connection is idle.
func ReleaseServer(ctx context.Context, db *pgxpool.Pool) {
	for _, c := range db.AcquireAllIdle(ctx) {
		_, _ = c.Exec(ctx, `SELECT pg_advisory_unlock_shared($1)`, int64(KeyServer))
		// Without the lock the connection is no server's: it goes.
		_ = c.Conn().Close(ctx)
		c.Release()
	}
}

// LockExclusive takes the server lock alone, for a rebuild or a reset.
// It fails with ErrDatabaseInUse while any server runs on the database.
func LockExclusive(ctx context.Context, db *pgxpool.Pool) (*Lock, error) {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock database: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(KeyServer)).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("lock database: %w", err)
	}
	if !ok {
		inUse := "a Waybill server is running on this database: stop it first (Ctrl-C where `waybill serve` runs, or send its process SIGTERM; every one, when several share the database), then run this again"
		if who := holder(ctx, conn, KeyOnlineRebuild); who != "" {
			inUse = "an online rebuild is running on this database (" + who + "): let it finish, or stop it, then run this again"
		}
		conn.Release()
		return nil, fmt.Errorf("%w: %s", ErrDatabaseInUse, inUse)
	}
	return &Lock{conn: conn}, nil
}

// LockOnline takes the online rebuild's locks: KeyOnlineRebuild alone, so
// a second online rebuild fails with ErrRebuildRunning naming the first,
// and the server lock shared, so an offline rebuild or a reset waits for
// it as for a server (and it fails with ErrDatabaseInUse while one runs).
func LockOnline(ctx context.Context, db *pgxpool.Pool) (*Lock, error) {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock database: %w", err)
	}
	var mine, shared bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(KeyOnlineRebuild)).Scan(&mine); err != nil {
		conn.Release()
		return nil, fmt.Errorf("lock database: %w", err)
	}
	if !mine {
		who := holder(ctx, conn, KeyOnlineRebuild)
		conn.Release()
		return nil, fmt.Errorf("%w on this database (%s): let it finish; only one runs at a time", ErrRebuildRunning, who)
	}
	l := &Lock{conn: conn, key: KeyOnlineRebuild}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock_shared($1)`, int64(KeyServer)).Scan(&shared); err != nil || !shared {
		l.Release()
		if err != nil {
			return nil, fmt.Errorf("lock database: %w", err)
		}
		return nil, fmt.Errorf("%w: an offline rebuild or a reset is running on this database; run this when it has finished", ErrDatabaseInUse)
	}
	l.shared = true
	return l, nil
}

// holder names the session that holds key, "" when none does: its
// PostgreSQL backend, client address, application and start.
func holder(ctx context.Context, conn *pgxpool.Conn, key LockKey) string {
	var pid int32
	var addr, app string
	var since time.Time
	err := conn.QueryRow(ctx, `SELECT a.pid, coalesce(host(a.client_addr), 'a local socket'), a.application_name, a.backend_start
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.mode = 'ExclusiveLock'
			AND l.classid = ($1::bigint >> 32)::text::oid AND l.objid = ($1::bigint & x'ffffffff'::bigint)::text::oid
		LIMIT 1`, int64(key)).Scan(&pid, &addr, &app, &since)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("PostgreSQL backend %d of %q from %s, connected since %s", pid, app, addr, since.UTC().Format(time.RFC3339))
}

// Release gives the lock up; safe to call twice.
func (l *Lock) Release() {
	if l.conn == nil {
		return
	}
	if l.shared {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock_shared($1)`, int64(KeyServer))
		cancel()
	}
	releaseConn(l.conn, `SELECT pg_advisory_unlock($1)`, cmp.Or(l.key, KeyServer))
	l.conn = nil
}

// releaseConn unlocks key on conn and gives the connection back; should the
// unlock fail, it ends the session, which drops every lock it holds.
func releaseConn(conn *pgxpool.Conn, unlock string, key LockKey) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, unlock, int64(key)); err != nil {
		_ = conn.Conn().Close(ctx)
	}
	conn.Release()
}

// Lease is a loop's session advisory lock, held on a connection of its own:
// the process that holds it does the loop's work, one process at a time. A
// process that dies drops it with its session, so another takes over at
// its next try, with no lease to wait out. Whether this process holds it
// shows in the gauge waybill_lease_held{loop}, and the log says the first
// time it holds it and the first time it stands by (later changes at debug
// level), so a loop that stands by never does so silently. A Lease is used by one
// goroutine, its loop's.
type Lease struct {
	loop string
	key  LockKey
	db   *pgxpool.Pool
	log  *slog.Logger
	held prometheus.Gauge
	conn *pgxpool.Conn
	// mine is the last answer of Take; toldHeld and toldStandby say whether
	// the log has said each once.
	mine, toldHeld, toldStandby bool
}

// NewLease makes the lease of the loop named loop on key. Its gauge is
// registered with reg (nil: nowhere); the leases of a process share one
// vector.
func NewLease(db *pgxpool.Pool, key LockKey, loop string, log *slog.Logger, reg prometheus.Registerer) *Lease {
	return &Lease{loop: loop, key: key, db: db, log: log, held: leaseGauge(reg).WithLabelValues(loop)}
}

// leaseGauge is the process's waybill_lease_held vector on reg: the first
// lease registers it, the others find it there.
func leaseGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "waybill_lease_held",
		Help: "1 while this process holds the loop's lease and does its work; 0 while another process holds it, or, for a loop that holds it only while it works, between its passes.",
	}, []string{"loop"})
	if reg == nil {
		return vec
	}
	if err := reg.Register(vec); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			return already.ExistingCollector.(*prometheus.GaugeVec)
		}
		panic(fmt.Sprintf("register waybill_lease_held: %v", err))
	}
	return vec
}

// Take reports whether this process holds the lease, taking it when it is
// free. A lease already held is checked on its connection: a session that
// ended has dropped it, and it is taken again if it can be.
func (l *Lease) Take(ctx context.Context) (bool, error) {
	if l.conn != nil {
		if _, err := l.conn.Exec(ctx, `SELECT 1`); err == nil {
			return true, nil
		}
		l.log.Warn("lease lost with its connection", "loop", l.loop)
		l.dropConn()
	}
	conn, err := l.db.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("take the %s lease: %w", l.loop, err)
	}
	var mine bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(l.key)).Scan(&mine); err != nil {
		conn.Release()
		return false, fmt.Errorf("take the %s lease: %w", l.loop, err)
	}
	if !mine {
		conn.Release()
	} else {
		l.conn = conn
	}
	l.tell(mine)
	return mine, nil
}

// Conn is the connection that holds the lease, for work that must run
// under it; nil while the lease is not held.
func (l *Lease) Conn() *pgxpool.Conn { return l.conn }

// Release gives the lease up; safe to call when it is not held.
func (l *Lease) Release() {
	if l.conn == nil {
		return
	}
	releaseConn(l.conn, `SELECT pg_advisory_unlock($1)`, l.key)
	l.conn = nil
	l.held.Set(0)
}

// dropConn ends the session of a lease whose connection failed.
func (l *Lease) dropConn() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.conn.Conn().Close(ctx)
	l.conn.Release()
	l.conn = nil
	l.held.Set(0)
}

// tell sets the gauge and logs a change of the answer: at info level the
// first time of each, at debug level after that.
func (l *Lease) tell(mine bool) {
	if mine {
		l.held.Set(1)
	} else {
		l.held.Set(0)
	}
	if l.mine == mine && (l.toldHeld || l.toldStandby) {
		return
	}
	l.mine = mine
	level := slog.LevelDebug
	msg := "another process holds the lease; this one stands by"
	if mine {
		msg = "this process holds the lease and does the loop's work"
		if !l.toldHeld {
			level, l.toldHeld = slog.LevelInfo, true
		}
	} else if !l.toldStandby {
		level, l.toldStandby = slog.LevelInfo, true
	}
	l.log.Log(context.Background(), level, msg, "loop", l.loop)
}
