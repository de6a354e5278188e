package projection

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

// The sweep's selections take the most overdue first, on the
// deliveries_due, deliveries_in_flight and deliveries_claimable indexes; each
// selects by the lifecycle's rule for its step.
var (
	expiredSQL = `SELECT id FROM deliveries WHERE ` + lifecycle.LeaseExpiryRule.SQL("", "$1") + ` ORDER BY lease_end LIMIT $2`
	// sweepDueSQL takes, for each target with deliveries a worker may
	// claim (found by skipping along deliveries_claimable from one target
	// to the next), its $2 most overdue deliveries the sweep is to wake at
	// $1 (lifecycle.SweepWakeRule: a retry only once its own process has
	// had lifecycle.WakeGrace to claim it), in the order the claim takes
	// them; none of a target disabled, whose health holds its deliveries
	// or that is at its limits (target_allowance), which are then neither
	// woken nor stalled.
	sweepDueSQL = `WITH RECURSIVE t(name) AS (
			(SELECT target FROM deliveries WHERE ` + lifecycle.CatchUpRule.StatesSQL("") + ` ORDER BY target LIMIT 1)
			UNION ALL
			SELECT (SELECT target FROM deliveries WHERE ` + lifecycle.CatchUpRule.StatesSQL("") + ` AND target > t.name
				ORDER BY target LIMIT 1)
			FROM t WHERE t.name IS NOT NULL)
		SELECT d.id FROM t, LATERAL (SELECT id FROM deliveries d
			WHERE d.target = t.name AND ` + lifecycle.CatchUpRule.StatesSQL("d") + ` AND ` + lifecycle.SweepWakeRule.SQL("d", "$1") + `
				AND target_allowance(t.name, $1, 1, 0) > 0
			ORDER BY coalesce(d.next_due, d.lease_end, d.updated_at) LIMIT $2) d
		WHERE t.name IS NOT NULL`
	// scheduledDueSQL takes the scheduled deliveries whose time has come,
	// on deliveries_due (lifecycle.DueRule).
	scheduledDueSQL = `SELECT id FROM deliveries WHERE ` + lifecycle.DueRule.SQL("", "$1") + ` ORDER BY next_due LIMIT $2`
	receiptSQL      = `SELECT id FROM deliveries WHERE ` + lifecycle.ReceiptTimeoutRule.SQL("", "$1") + ` ORDER BY next_due LIMIT $2`
	// releaseSQL finds the blocked deliveries of the lanes of targets that
	// keep no order any more ($1 lists those that do): the lanes with
	// deliveries waiting, on lanes_waiting, then theirs on deliveries_lane.
	releaseSQL = `SELECT d.id FROM lanes l, LATERAL (SELECT id FROM deliveries d
			WHERE d.target = l.target AND d.lane_key = l.ordering_key AND ` + lifecycle.UnblockRule.StatesSQL("d") + `
			ORDER BY d.lane_seq LIMIT $2) d
		WHERE l.waiting > 0 AND NOT (l.target = ANY(coalesce($1::text[], '{}'))) LIMIT $2`
	// owedSQL finds the heads of the lanes of the targets $1 that settled
	// for their lane with deliveries waiting behind them (LaneBook.Stuck).
	// A command settling a head passes its lane on in the same
	// transaction, so only a journal an earlier build wrote leaves one.
	owedSQL = `SELECT l.head_delivery_id FROM lanes l
		WHERE l.waiting > 0 AND l.head_settled AND l.target = ANY($1) LIMIT $2`
	// heldSQL finds the heads of the lanes of the targets $1, each with its
	// head_alert_after $2, that have kept deliveries waiting that long at
	// $3, and were not reported yet.
	heldSQL = `SELECT l.head_delivery_id FROM unnest($1::text[], $2::interval[]) AS t(target, after),
		LATERAL (SELECT head_delivery_id FROM lanes l WHERE l.target = t.target AND l.waiting > 0 AND NOT l.held
			AND l.waiting_since <= $3::timestamptz - t.after LIMIT $4) l
		LIMIT $4`
)

// ExpiredLeases returns up to limit deliveries whose lease has expired at
// now (lifecycle.LeaseExpiryRule), the longest expired first.
func ExpiredLeases(ctx context.Context, q journal.Querier, now time.Time, limit int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "expired leases", expiredSQL, now, limit)
}

// SweepDue returns, for each target with deliveries a worker may claim, up
// to perTarget of those the sweep is to wake at now
// (lifecycle.SweepWakeRule), in the order the claim takes them.
func SweepDue(ctx context.Context, q journal.Querier, now time.Time, perTarget int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "deliveries due", sweepDueSQL, now, perTarget)
}

// ScheduledDue returns up to limit scheduled deliveries due at now
// (lifecycle.DueRule), the longest due first.
func ScheduledDue(ctx context.Context, q journal.Querier, now time.Time, limit int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "scheduled deliveries due", scheduledDueSQL, now, limit)
}

// OverdueReceipts returns up to limit deliveries whose receipt is overdue
// at now (lifecycle.ReceiptTimeoutRule), the most overdue first.
func OverdueReceipts(ctx context.Context, q journal.Querier, now time.Time, limit int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "overdue receipts", receiptSQL, now, limit)
}

// BlockedOutOfOrder returns up to limit blocked deliveries
// (lifecycle.UnblockRule) of the lanes of targets not in fifo, the targets
// that keep order: those a target's change of ordering left waiting.
func BlockedOutOfOrder(ctx context.Context, q journal.Querier, fifo []string, limit int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "deliveries blocked", releaseSQL, fifo, limit)
}

// OwedLanes returns up to limit heads of lanes of the targets fifo that
// settled for their lane without passing it on.
func OwedLanes(ctx context.Context, q journal.Querier, fifo []string, limit int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "lanes owed", owedSQL, fifo, limit)
}

// HeldLaneHeads returns up to limit heads of the lanes of targets, each
// with its head_alert_after in after, that have kept deliveries waiting
// that long at now and were not reported held yet.
func HeldLaneHeads(ctx context.Context, q journal.Querier, targets []string, after []time.Duration, now time.Time,
	limit int) ([]uuid.UUID, error) {
	return deliveryIDs(ctx, q, "held lanes", heldSQL, targets, after, now, limit)
}

// deliveryIDs runs a selection of delivery ids.
func deliveryIDs(ctx context.Context, q journal.Querier, what, sql string, args ...any) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, sql, args...)
	var ids []uuid.UUID
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	}
	if err != nil {
		return nil, fmt.Errorf("select the %s: %w", what, err)
	}
	return ids, nil
}

// claimableSQL selects the deliveries a worker may take at $2
// (lifecycle.CatchUpRule): queued and stalled ones, retrying ones that are
// due or were woken, and delivering ones whose lease has run out. Its
// states are the predicate of the index deliveries_claimable.
var claimableSQL = lifecycle.CatchUpRule.SQL("d", "$2")

// ClaimableChoiceSQL chooses and locks up to $3 deliveries of target $1 that a
// worker may take at $2, no more than the target's health and limits let
// through then, $5 of its attempts in flight being ended by the same
// transaction (target_allowance's body, schema.TargetAllowanceSQL, so
// that the statement's generic plan holds it planned), oldest due first,
// and reads their messages (ChooseSQL). It locks each message before its delivery (the
// order of FOR UPDATE OF): a candidate whose message another transaction
// holds is then skipped with nothing locked. Locking the delivery first
// would keep it locked while skipping its message, and the holder of the
// message, which writes its deliveries, would wait on a row it has every
// right to: with an outcome's batch choosing after its own locks
// (the commands' queueChooseDue), two such batches deadlocked. It starts
// at the due key $4 (the commands' cursor of the target) and returns each
// one's key. QueueChooseClaimable queues it; it is exported for the
// claim's test of its plan.
var ClaimableChoiceSQL = claimableChoice(schema.TargetAllowanceSQL("$1::text", "$2::timestamptz", "$3::int", "$5::int"))

// UnlimitedChoiceSQL is ClaimableChoiceSQL for a target without limits
// (schema.UnlimitedAllowanceSQL), without its $5.
var UnlimitedChoiceSQL = claimableChoice(schema.UnlimitedAllowanceSQL("$1::text", "$2::timestamptz", "$3::int"))

// claimableChoice is the choice of ClaimableChoiceSQL with the allowance
// given as its LIMIT.
func claimableChoice(allowance string) string {
	return ChooseSQL(`SELECT d.id, d.message_id, ` + claimKeySQL + `, m.version
	FROM deliveries d JOIN messages m ON m.id = d.message_id
	WHERE d.target = $1 AND ` + claimableSQL + ` AND ` + claimKeySQL + ` >= $4
	ORDER BY ` + claimKeySQL + ` LIMIT ` + allowance + `
	FOR UPDATE OF m, d SKIP LOCKED`)
}

// claimKeySQL is the due key of deliveries_claimable.
const claimKeySQL = `coalesce(d.next_due, d.lease_end, d.updated_at)`

// QueueChooseClaimable queues on b the choice of up to limit deliveries of
// target that a worker may take at now, no more than its health and
// limits let through with freeing of its attempts in flight ended by the
// same transaction, oldest due first from the due key from on, locking them with their messages (FOR UPDATE SKIP LOCKED), and
// reading the messages; fn gets them, in due order, once the batch is read.
// A target the caller's configuration holds to have no limits
// (!limited) is chosen without reading them (schema.UnlimitedAllowanceSQL).
// The claim runs it with sorts and bitmap scans off, so that it walks
// deliveries_claimable in order.
func QueueChooseClaimable(b *pgx.Batch, target string, limited bool, now time.Time, limit, freeing int, from pgtype.Timestamptz,
	fn func([]Chosen)) {
	sql, args := ClaimableChoiceSQL, []any{target, now, limit, from, freeing}
	if !limited {
		sql, args = UnlimitedChoiceSQL, args[:4]
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		chosen, err := ScanChosen(rows)
		if err == nil {
			fn(chosen)
		}
		return err
	})
}

// callbackDueSQL selects the callbacks a worker may take at $1
// (lifecycle.CallbackCatchUpRule), on the index callbacks_due, locking
// each with its message.
var callbackDueSQL = `SELECT c.message_id FROM callbacks c JOIN messages m ON m.id = c.message_id
	WHERE ` + lifecycle.CallbackCatchUpRule.SQL("c", "$1") + `
	ORDER BY coalesce(c.next_due, c.lease_end) LIMIT $2
	FOR UPDATE OF c, m SKIP LOCKED`

// QueueDueCallbacks queues on b the choice of up to limit callbacks that
// are due at now, oldest first, locking each with its message and skipping
// the rows other transactions hold; their messages' ids go into dst when
// the batch is read.
func QueueDueCallbacks(b *pgx.Batch, now time.Time, limit int, dst *[]uuid.UUID) {
	b.Queue(callbackDueSQL, now, limit).Query(func(rows pgx.Rows) error {
		var err error
		*dst, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		return err
	})
}
