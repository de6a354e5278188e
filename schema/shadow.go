package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ShadowSchema holds the projection tables an online rebuild fills beside
// the live ones in public, until SwitchShadow moves them in.
const ShadowSchema = "waybill_rebuild"

// retiredSchema holds the live tables a switch replaced until
// DropRetired drops them, once the switch has committed: a DROP in the
// switch would unlink their files at its commit, with the locks still
// held, for a time that grows with the tables.
const retiredSchema = "waybill_retired"

// shadowPath makes the unqualified names of a transaction's statements
// resolve to the shadow tables first, and to public for the rest (the
// journal, the configuration), and creates what the DDL creates in the
// shadow schema.
const shadowPath = `SET LOCAL search_path = ` + ShadowSchema + `, public`

// ErrSwitchBusy is returned by SwitchShadow when the live tables were not
// all locked: a long transaction held one past the lock timeout, or the
// switch was the side PostgreSQL chose to end of a deadlock with a command
// (which holds one table and waits for another the switch holds; the
// commands retry theirs). The caller catches up and tries again.
var ErrSwitchBusy = errors.New("the live projection tables are busy")

// switchLockTimeout bounds SwitchShadow's wait for each live table. It is
// above PostgreSQL's default deadlock_timeout (1 s): a wait in a cycle with
// commands is found by the deadlock check first, which reorders the queue
// of a table when that breaks the cycle, and otherwise ends one side.
const switchLockTimeout = 3 * time.Second

// CheckJournal says whether the journal is of this build's version, reading
// only: an online rebuild runs beside servers of another build, whose
// projections may be of another version, but it folds the journal with this
// build's code.
func CheckJournal(ctx context.Context, db *pgxpool.Pool) error {
	stored, err := StoredVersion(ctx, db, PartJournal)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("no journal in this database: start `waybill serve` once to create it")
	}
	if err != nil {
		return err
	}
	if stored != JournalVersion {
		return &VersionError{Part: PartJournal, Stored: stored, Code: JournalVersion}
	}
	return nil
}

// CreateShadow drops the shadow schema, whatever an earlier run left in it,
// and creates it anew in one transaction: the projection tables bare, load
// to fill them (with COPY FREEZE: they are new in the transaction), then
// their keys and indexes. The live tables are not touched.
func CreateShadow(ctx context.Context, db *pgxpool.Pool, load func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The functions read target_buckets, in public, which a database
		// of an older build lacks.
		if _, err := tx.Exec(ctx, limitsDDL); err != nil {
			return fmt.Errorf("create target buckets table: %w", err)
		}
		if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+ShadowSchema+` CASCADE; CREATE SCHEMA `+ShadowSchema+`; `+shadowPath); err != nil {
			return fmt.Errorf("create schema %s: %w", ShadowSchema, err)
		}
		if _, err := tx.Exec(ctx, projectionTablesDDL); err != nil {
			return fmt.Errorf("create shadow tables: %w", err)
		}
		// The minute counts' horizon stays public's, which the upserts of
		// the counts read.
		if _, err := tx.Exec(ctx, `DROP TABLE `+ShadowSchema+`.delivery_minutes_kept`); err != nil {
			return fmt.Errorf("create shadow tables: %w", err)
		}
		if err := load(tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, projectionIndexesDDL); err != nil {
			return fmt.Errorf("create shadow indexes: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create shadow projections: %w", err)
	}
	return nil
}

// InShadow runs fn in a transaction whose unqualified table names resolve
// to the shadow tables.
func InShadow(ctx context.Context, db *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, shadowPath); err != nil {
			return err
		}
		return fn(tx)
	})
}

// DropRetired drops the tables a switch replaced (retiredSchema), if any.
func DropRetired(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, `DROP SCHEMA IF EXISTS `+retiredSchema+` CASCADE`); err != nil {
		return fmt.Errorf("drop the replaced projection tables (schema %s): %w", retiredSchema, err)
	}
	return nil
}

// DropShadow drops the shadow schema, for a run that gives up.
func DropShadow(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, `DROP SCHEMA IF EXISTS `+ShadowSchema+` CASCADE`); err != nil {
		return fmt.Errorf("drop schema %s: %w", ShadowSchema, err)
	}
	return nil
}

// SwitchShadow swaps the shadow tables in for the live ones in one
// transaction and returns how long it held the live tables. It locks them
// all (ACCESS EXCLUSIVE: every command and reader of them waits, and as each
// command writes its events and its rows in one transaction, every event
// that changes them has committed) and the journal against appends, calls apply to bring the shadow tables
// up to date (unqualified names resolve to them), moves the live tables
// aside (DropRetired drops them once it has committed) and the shadow
// ones, with their keys and indexes, into public, runs the
// functions' DDL there (a build with another model brings its own), drops
// the shadow schema and records the projections' version. Servers' prepared
// statements plan again against the new tables, which have the same names.
// A lock not granted within switchLockTimeout fails it with ErrSwitchBusy,
// having changed nothing.
func SwitchShadow(ctx context.Context, db *pgxpool.Pool, apply func(pgx.Tx) error) (held time.Duration, err error) {
	var locked time.Time
	// What a switch that died before DropRetired left.
	if err := DropRetired(ctx, db); err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		live := make([]string, len(projectionTables))
		for i, t := range projectionTables {
			live[i] = "public." + t
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, switchLockTimeout.Milliseconds())); err != nil {
			return err
		}
		// The journal too, against appends only (SHARE): a command that
		// appended before commits before the switch; one that appends
		// after meets the version the switch records (journal.Queue's
		// check), so a server of another build writes
		// nothing from the switch on. After the live tables, the order
		// every command takes them in.
		if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(live, ", ")+` IN ACCESS EXCLUSIVE MODE; LOCK TABLE journal IN SHARE MODE`); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") {
				return ErrSwitchBusy
			}
			return fmt.Errorf("lock the live projection tables: %w", err)
		}
		locked = time.Now()
		if _, err := tx.Exec(ctx, shadowPath); err != nil {
			return err
		}
		if err := apply(tx); err != nil {
			return err
		}
		var swap strings.Builder
		swap.WriteString(`SET LOCAL search_path = public; CREATE SCHEMA ` + retiredSchema + `;`)
		for _, t := range projectionTables {
			fmt.Fprintf(&swap, "ALTER TABLE public.%s SET SCHEMA %s; ALTER TABLE %s.%s SET SCHEMA public;\n", t, retiredSchema, ShadowSchema, t)
		}
		swap.WriteString(`DROP SCHEMA ` + ShadowSchema + ` CASCADE`)
		if _, err := tx.Exec(ctx, swap.String()); err != nil {
			return fmt.Errorf("swap the projection tables: %w", err)
		}
		// No server of an older build writes from here on.
		if err := upgradeTargets(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, projectionTablesDDL); err != nil {
			return fmt.Errorf("create projection functions: %w", err)
		}
		if _, err := tx.Exec(ctx, projectionIndexesDDL); err != nil {
			return fmt.Errorf("create projection functions: %w", err)
		}
		// The digest names the DDL of every part: another build's runs
		// whole at the next start.
		if _, err := tx.Exec(ctx, `INSERT INTO schema_version (part, version) VALUES ($1, $2)
				ON CONFLICT (part) DO UPDATE SET version = excluded.version`, PartProjections, ProjectionVersion); err != nil {
			return fmt.Errorf("record projections version: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM schema_digest WHERE digest <> $1`, ddlDigest); err != nil {
			return fmt.Errorf("record projections version: %w", err)
		}
		return nil
	})
	if locked.IsZero() {
		return 0, err
	}
	held = time.Since(locked)
	if err != nil {
		return held, fmt.Errorf("switch projections: %w", err)
	}
	return held, nil
}
