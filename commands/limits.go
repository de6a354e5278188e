package commands

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

// A target's limits (lifecycle.Target.Limited: a max_concurrent or a
// rate) hold its claims across every process, decided in PostgreSQL as
// its health is. The choice of due deliveries takes no more than they let
// through (target_allowance), and targets_admit checks every transaction
// that claims, after its writes, under the target's claim lock held alone:
// the attempts in flight are counted on the deliveries
// (lifecycle.InFlightRule) and the claims take their tokens from the
// target's bucket (target_buckets), so the claims of two processes never
// both take the last slot or token. A target without limits counts
// nothing, writes nothing more, and its claims hold the lock shared.
//
// A claim refused by the limits leaves its delivery held, neither woken
// nor stalled: an outcome of the target claims the next due one in its
// transaction (workers.DeliveryStore), and a worker whose catch-up the
// rate held back comes back when the bucket holds a token again
// (HeldUntil).

// limitedFor is how long this Writer leaves out the claims of a target
// targets_admit refused for its limits in a batch: the next choice of
// due deliveries counts them anew.
const limitedFor = 100 * time.Millisecond

// targetLimited returns the target targets_admit refused a claim of
// because it is at its limits.
func targetLimited(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == schema.CodeTargetLimited {
		return pgErr.Detail, true
	}
	return "", false
}

// limitTarget records a refusal of targetLimited, for limitedFor.
func (w *Writer) limitTarget(target string) {
	until := w.now().Add(limitedFor)
	w.gates.update(target, func(seen *gateSeen) { seen.full = until })
}

// queueReadTokens queues the read of the tokens target's bucket holds at
// now into dst, nil for a target without a rate.
func queueReadTokens(b *pgx.Batch, target string, now time.Time, dst **float64) {
	b.Queue(`SELECT `+schema.TargetTokensSQL("t.spec", "t.name", "$2")+` FROM (SELECT) one LEFT JOIN targets t ON t.name = $1`, target, now).
		QueryRow(func(row pgx.Row) error { return row.Scan(dst) })
}

// learnTokens records when the bucket of target, which held tokens at now
// (nil: not read), holds a whole token again once the taken claims take
// theirs: a worker held back by it comes back then (HeldUntil). Both a
// catch-up and an outcome that claims the next due delivery learn it, so
// that the last outcome of a drain its rate held back is followed.
func (w *Writer) learnTokens(target lifecycle.Target, tokens *float64, taken int, now time.Time) {
	if target.Rate == nil || tokens == nil {
		return
	}
	at := target.Rate.NextToken(*tokens-float64(taken), now)
	w.gates.update(target.Name, func(seen *gateSeen) { seen.token = at })
}
