package journal

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Mark is an event's place in commit order: the id of the transaction that
// wrote it, then its position. The zero Mark is before every event.
type Mark struct {
	TxID     uint64
	Position int64
}

// committedSQL reads in (txid, position) order, as the feed does (see
// feed.md): only rows of transactions below the snapshot's xmin, all of
// which have ended, so no row can later appear before a mark already
// returned, whatever order the transactions committed in. The row
// comparison and the order run on the journal_txid index. The text of the
// txid has its own name: ORDER BY would take an output column called txid
// before the table's, and sort the text.
const committedSQL = `SELECT txid::text AS txid_text, ` + columns + ` FROM journal
	WHERE (txid, position) > ($1::text::xid8, $2)
	AND txid < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY txid, position LIMIT $3`

// ReadCommitted returns up to limit events after the mark, in commit order,
// with the mark of each: by transaction id, which two transactions that
// waited on each other may hold the other way round from their events'
// positions (a reader whose fold is not per stream sorts what it read).
// It never returns an event of a transaction that
// could still commit, so reading on from the last mark misses nothing: an
// event written by a transaction open now comes in a later read, after it
// ends.
func ReadCommitted(ctx context.Context, q Querier, after Mark, limit int) ([]Event, []Mark, error) {
	events, marks, err := scanMarked(ctx, q, committedSQL, strconv.FormatUint(after.TxID, 10), after.Position, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("read journal after %d/%d: %w", after.TxID, after.Position, err)
	}
	return events, marks, nil
}

// visibleSQL is committedSQL without its bound: every row the reader's
// snapshot holds.
const visibleSQL = `SELECT txid::text AS txid_text, ` + columns + ` FROM journal
	WHERE (txid, position) > ($1::text::xid8, $2)
	ORDER BY txid, position LIMIT $3`

// ReadVisible is ReadCommitted for a reader that sees every event it will
// ever need: one in a snapshot it stays in, or one that holds the writers
// off with a lock they take before they commit. It returns up to limit
// events after the mark that q sees, with their marks, whether or not
// transactions that could still commit are older: a later read from its
// last mark could miss their events.
func ReadVisible(ctx context.Context, q Querier, after Mark, limit int) ([]Event, []Mark, error) {
	events, marks, err := scanMarked(ctx, q, visibleSQL, strconv.FormatUint(after.TxID, 10), after.Position, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("read journal after %d/%d: %w", after.TxID, after.Position, err)
	}
	return events, marks, nil
}

// scanMarked runs sql, whose first column is the text of each event's
// txid, and returns the events with the mark of each.
func scanMarked(ctx context.Context, q Querier, sql string, args ...any) ([]Event, []Mark, error) {
	var (
		events []Event
		marks  []Mark
		txid   string
	)
	err := scan(ctx, q, sql, args, func(e Event) error {
		id, err := strconv.ParseUint(txid, 10, 64)
		if err != nil {
			return fmt.Errorf("position %d: txid %q: %w", e.Position, txid, err)
		}
		events = append(events, e)
		marks = append(marks, Mark{TxID: id, Position: e.Position})
		return nil
	}, &txid)
	return events, marks, err
}

// kindsSQL reads the events of some kinds after a position, in position
// order, with the text of each event's txid first, as committedSQL does.
const kindsSQL = `SELECT txid::text AS txid_text, ` + columns + ` FROM journal
	WHERE position > $1 AND kind = ANY($2::text[]) ORDER BY position`

// ReadKinds returns every event of one of kinds after position after, in
// position order, with the mark of each: which transaction wrote it. The
// benchmark reads a drain's claims and outcomes, and how the transactions
// grouped them, from it.
func ReadKinds(ctx context.Context, q Querier, after int64, kinds ...Kind) ([]Event, []Mark, error) {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	events, marks, err := scanMarked(ctx, q, kindsSQL, after, names)
	if err != nil {
		return nil, nil, fmt.Errorf("read journal after %d for %v: %w", after, kinds, err)
	}
	return events, marks, nil
}

// horizonSQL is the first transaction id that may not have ended: every
// transaction below it has.
const horizonSQL = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`

// Horizon returns a mark that every event committed from now on comes
// after, for a reader that starts with what happens next: reading on from
// it with ReadCommitted misses none of them (it may also return some that
// committed just before).
func Horizon(ctx context.Context, q Querier) (Mark, error) {
	rows, err := q.Query(ctx, horizonSQL)
	if err != nil {
		return Mark{}, fmt.Errorf("read the journal's horizon: %w", err)
	}
	xmin, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if err != nil {
		return Mark{}, fmt.Errorf("read the journal's horizon: %w", err)
	}
	id, err := strconv.ParseUint(xmin, 10, 64)
	if err != nil || id == 0 {
		return Mark{}, fmt.Errorf("read the journal's horizon: xmin %q", xmin)
	}
	// Every mark of a transaction from xmin on is after this one.
	return Mark{TxID: id - 1, Position: math.MaxInt64}, nil
}

// committedStreamsSQL is committedSQL for the streams alone.
const committedStreamsSQL = `SELECT txid::text AS txid_text, position, stream FROM journal
	WHERE (txid, position) > ($1::text::xid8, $2)
	AND txid < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY txid, position LIMIT $3`

// ReadCommittedStreams is ReadCommitted for a reader that needs only
// which streams moved: the stream of each of up to limit events after the
// mark, in commit order, and the mark of the last (after itself when
// there is none).
func ReadCommittedStreams(ctx context.Context, q Querier, after Mark, limit int) ([]string, Mark, error) {
	rows, err := q.Query(ctx, committedStreamsSQL, strconv.FormatUint(after.TxID, 10), after.Position, limit)
	if err != nil {
		return nil, after, fmt.Errorf("read journal streams after %d/%d: %w", after.TxID, after.Position, err)
	}
	defer rows.Close()
	var (
		streams []string
		txid    string
		last    = after
	)
	for rows.Next() {
		var (
			position int64
			stream   string
		)
		if err := rows.Scan(&txid, &position, &stream); err != nil {
			return nil, after, fmt.Errorf("read journal streams: %w", err)
		}
		id, err := strconv.ParseUint(txid, 10, 64)
		if err != nil {
			return nil, after, fmt.Errorf("read journal streams: position %d: txid %q: %w", position, txid, err)
		}
		streams = append(streams, stream)
		last = Mark{TxID: id, Position: position}
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("read journal streams after %d/%d: %w", after.TxID, after.Position, err)
	}
	return streams, last, nil
}
