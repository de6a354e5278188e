package journal

import "strconv"

// TransactionsSQL is the feed's read of the committed events after a
// place, one row per transaction in (txid, position) order: the txid, then
// an array of each column in Event's scan order (position, recorded_at,
// stream, version, delivery_id, target, kind, actor, old_state, new_state,
// payload). txid and position are SQL expressions of the place, so that
// the feed can take it from its offsets table in the same statement
// (watermill's SchemaAdapter wants the statement as text). Only
// transactions below the snapshot's xmin are read: every one of those has
// ended, so no event can appear behind the place later.
//
// The row comparison is a range of the journal_txid index, which the scan
// walks in order from the place and leaves after limit rows, whatever the
// backlog. The limit is on the rows, not the groups: with it on the groups
// the planner, which cannot tell how many rows a group holds, sorts the
// whole backlog; so a transaction the limit cuts comes in two reads. The
// inner ORDER BY gives each aggregate its events in position order.
func TransactionsSQL(txid, position string, limit int) string {
	return `SELECT txid, array_agg(position), array_agg(recorded_at), array_agg(stream), array_agg(version),
		array_agg(delivery_id), array_agg(coalesce(target, '')), array_agg(kind), array_agg(actor),
		array_agg(coalesce(old_state, '')), array_agg(coalesce(new_state, '')), array_agg(payload)
	FROM (
		SELECT txid, position, recorded_at, stream, version, delivery_id, target, kind, actor,
			old_state, new_state, payload
		FROM journal
		WHERE (txid, position) > (` + txid + `, ` + position + `)
			AND txid < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY txid, position
		LIMIT ` + strconv.Itoa(limit) + `
	) j
	GROUP BY txid
	ORDER BY txid`
}

// LagSQL is a select list of two columns: how many committed events lie
// after a place (txid and position, SQL expressions of it, as in
// TransactionsSQL), held back or not, and the recorded_at of the first of
// them in feed order, NULL when none. Both walk journal_txid from the
// place, so they cost what lies after it, not what the journal holds —
// provided the planner is kept from other scans, which the feed does.
func LagSQL(txid, position string) string {
	return `(SELECT count(*) FROM journal j WHERE (j.txid, j.position) > (` + txid + `, ` + position + `)),
	(SELECT j.recorded_at FROM journal j WHERE (j.txid, j.position) > (` + txid + `, ` + position + `)
		ORDER BY j.txid, j.position LIMIT 1)`
}

// AheadSQL is a condition that the event at position (an SQL expression)
// is live and after a place in the feed's (txid, position) order (txid and
// placePosition, SQL expressions of it, as in TransactionsSQL): a group at
// that place may read it again. An event before the place in position may
// be after it in that order, when its transaction got its id later. An
// event that left the journal is read by no group again.
func AheadSQL(position, txid, placePosition string) string {
	return `EXISTS (SELECT FROM journal j WHERE j.position = ` + position + `
		AND (j.txid, j.position) > (` + txid + `, ` + placePosition + `))`
}
