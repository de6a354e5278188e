package projection

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

const laneColumns = `l.target, l.ordering_key, l.last_seq, l.head_delivery_id, l.head_message_id, l.head_since,
	l.head_settled, l.waiting, l.waiting_since, l.held`

// laneRow scans a lane.
type laneRow struct {
	target, key               pgtype.Text
	lastSeq, waiting          pgtype.Int8
	head, headMessage         pgtype.UUID
	headSince, waitingSince   pgtype.Timestamptz
	headSettled, held         pgtype.Bool
	nextSeq                   pgtype.Int8
	nextDelivery, nextMessage pgtype.UUID
}

func (r *laneRow) dest() []any {
	return []any{&r.target, &r.key, &r.lastSeq, &r.head, &r.headMessage, &r.headSince, &r.headSettled,
		&r.waiting, &r.waitingSince, &r.held}
}

func (r *laneRow) lane() Lane {
	return Lane{LaneID: LaneID{r.target.String, r.key.String}, LastSeq: r.lastSeq.Int64,
		Head: r.head.Bytes, HeadMessage: r.headMessage.Bytes, HeadSince: timeOf(r.headSince),
		HeadSettled: r.headSettled.Bool, Waiting: r.waiting.Int64, WaitingSince: timeOf(r.waitingSince), Held: r.held.Bool}
}

// LaneRead is a lane as a command read it, with the first delivery waiting
// in it, if any.
type LaneRead struct {
	Lane  Lane
	First []Waiter
}

// QueueLoadLanes queues on b the read of the lanes named (the target and
// the key at each index), each with the first delivery waiting in it; the
// returned function gives them once the batch is read, a lane with no row
// as the zero Lane.
func QueueLoadLanes(b *pgx.Batch, targets, keys []string) func() []LaneRead {
	var out []LaneRead
	b.Queue(`SELECT k.target, k.key, l.last_seq, l.head_delivery_id, l.head_message_id, l.head_since,
			coalesce(l.head_settled, false), coalesce(l.waiting, 0), l.waiting_since, coalesce(l.held, false),
			n.lane_seq, n.id, n.message_id
		FROM unnest($1::text[], $2::text[]) AS k(target, key)
		LEFT JOIN LATERAL (SELECT * FROM lanes l WHERE l.target = k.target AND l.ordering_key = k.key OFFSET 0) l ON true
		LEFT JOIN LATERAL (SELECT lane_seq, id, message_id FROM deliveries n
			WHERE n.target = k.target AND n.lane_key = k.key AND `+laneWaitingSQL+`
			ORDER BY n.lane_seq LIMIT 1) n ON true`, targets, keys).
		Query(func(rows pgx.Rows) error {
			var r laneRow
			dest := append(r.dest(), &r.nextSeq, &r.nextDelivery, &r.nextMessage)
			_, err := pgx.ForEachRow(rows, dest, func() error {
				lr := LaneRead{Lane: r.lane()}
				if r.nextDelivery.Valid {
					lr.First = []Waiter{{Seq: r.nextSeq.Int64, Delivery: r.nextDelivery.Bytes, Message: r.nextMessage.Bytes}}
				}
				out = append(out, lr)
				return nil
			})
			return err
		})
	return func() []LaneRead { return out }
}

// laneWaitingSQL selects the blocked deliveries of a lane, as n, on the
// deliveries_lane index, whose predicate is the same.
var laneWaitingSQL = lifecycle.UnblockRule.StatesSQL("n")

// deleteLanesSQL deletes the lanes of the targets ($1) and keys ($2).
const deleteLanesSQL = `DELETE FROM lanes l USING unnest($1::text[], $2::text[]) AS k(target, key)
	WHERE l.target = k.target AND l.ordering_key = k.key`

// queueLanes queues the writes of the lanes changed: an upsert of those
// that hold work and a delete of those that are empty now.
func queueLanes(b *pgx.Batch, lanes []Lane) {
	var up laneColumnsOf
	var goneTargets, goneKeys []string
	for _, l := range lanes {
		if l.empty() {
			goneTargets, goneKeys = append(goneTargets, l.Target), append(goneKeys, l.Key)
			continue
		}
		up.add(l)
	}
	if len(goneTargets) > 0 {
		b.Queue(deleteLanesSQL, goneTargets, goneKeys)
	}
	if len(up.target) > 0 {
		b.Queue(`INSERT INTO lanes (target, ordering_key, last_seq, head_delivery_id, head_message_id, head_since,
				head_settled, waiting, waiting_since, held)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::uuid[], $5::uuid[], $6::timestamptz[],
				$7::bool[], $8::bigint[], $9::timestamptz[], $10::bool[])
			ON CONFLICT (target, ordering_key) DO UPDATE SET last_seq = excluded.last_seq,
				head_delivery_id = excluded.head_delivery_id, head_message_id = excluded.head_message_id,
				head_since = excluded.head_since, head_settled = excluded.head_settled, waiting = excluded.waiting,
				waiting_since = excluded.waiting_since, held = excluded.held`, up.args()...)
	}
}

// laneColumnsOf holds lanes column by column, for unnest.
type laneColumnsOf struct {
	target, key             []string
	lastSeq, waiting        []int64
	head, headMessage       []pgtype.UUID
	headSince, waitingSince []pgtype.Timestamptz
	headSettled, held       []bool
}

func (c *laneColumnsOf) add(l Lane) {
	c.target, c.key = append(c.target, l.Target), append(c.key, l.Key)
	c.lastSeq, c.waiting = append(c.lastSeq, l.LastSeq), append(c.waiting, l.Waiting)
	c.head, c.headMessage = append(c.head, pgUUID(l.Head)), append(c.headMessage, pgUUID(l.HeadMessage))
	c.headSince, c.waitingSince = append(c.headSince, pgTime(l.HeadSince)), append(c.waitingSince, pgTime(l.WaitingSince))
	c.headSettled, c.held = append(c.headSettled, l.HeadSettled), append(c.held, l.Held)
}

func (c *laneColumnsOf) args() []any {
	return []any{c.target, c.key, c.lastSeq, c.head, c.headMessage, c.headSince, c.headSettled, c.waiting,
		c.waitingSince, c.held}
}

// copyLanes loads the fold's lanes into the lanes table of a rebuild.
func copyLanes(ctx context.Context, tx pgx.Tx, lanes []Lane) error {
	var c laneColumnsOf
	for _, l := range lanes {
		c.add(l)
	}
	if len(c.target) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO lanes (target, ordering_key, last_seq, head_delivery_id, head_message_id, head_since,
			head_settled, waiting, waiting_since, held)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::uuid[], $5::uuid[], $6::timestamptz[],
			$7::bool[], $8::bigint[], $9::timestamptz[], $10::bool[])`, c.args()...)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store lanes: %w", err)
	}
	return nil
}

// checkLanes compares the lanes table with the fold's lanes.
func checkLanes(ctx context.Context, q journal.Querier, f *Folded) ([]Violation, error) {
	rows, err := q.Query(ctx, `SELECT `+laneColumns+` FROM lanes l ORDER BY l.target, l.ordering_key`)
	if err != nil {
		return nil, fmt.Errorf("audit lanes: %w", err)
	}
	stored := map[LaneID]Lane{}
	var r laneRow
	if _, err := pgx.ForEachRow(rows, r.dest(), func() error {
		l := r.lane()
		stored[l.LaneID] = l
		return nil
	}); err != nil {
		return nil, fmt.Errorf("audit lanes: %w", err)
	}
	var out []Violation
	for _, want := range f.lanes.All() {
		got, ok := stored[want.LaneID]
		delete(stored, want.LaneID)
		switch {
		case !ok:
			out = append(out, Violation{Problem: fmt.Sprintf("%s is in the journal but not in the lanes table", want.LaneID)})
		case !sameLane(got, want):
			for _, p := range diffFields(got, want) {
				out = append(out, Violation{Problem: fmt.Sprintf("%s: %s", want.LaneID, p)})
			}
		}
	}
	for id := range stored {
		out = append(out, Violation{Problem: fmt.Sprintf("%s is in the lanes table but not in the journal", id)})
	}
	return out, nil
}

func sameLane(a, b Lane) bool {
	return a.LaneID == b.LaneID && a.LastSeq == b.LastSeq && a.Head == b.Head && a.HeadMessage == b.HeadMessage &&
		a.HeadSince.Equal(b.HeadSince) && a.HeadSettled == b.HeadSettled && a.Waiting == b.Waiting &&
		a.WaitingSince.Equal(b.WaitingSince) && a.Held == b.Held
}

// LaneCursor is where a page of lanes ended, as the lists hand it out: the
// last lane's ordering key, as unpadded base64url, opaque to clients.
func LaneCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// ParseLaneCursor reads a cursor LaneCursor gave: the ordering key the
// next page starts after, which is one lifecycle.CheckOrderingKey accepts.
// Anything else is a *lifecycle.FieldError on the field cursor.
func ParseLaneCursor(s string) (string, error) {
	key, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(key) == 0 || lifecycle.CheckOrderingKey("cursor", string(key)) != nil {
		return "", &lifecycle.FieldError{Field: "cursor", Problem: "is not a cursor of this list: pass next_cursor as it was given"}
	}
	return string(key), nil
}

// LaneWithHead is a lane as listed: the lane, and the state of its head
// (empty when none holds it).
type LaneWithHead struct {
	Lane
	HeadState lifecycle.DeliveryState
}

// ListLanes reads up to limit lanes of a target, by ordering key after
// after (all when ""), only those with deliveries waiting when blocked: a
// range of lanes_pkey, or of lanes_waiting with blocked, never a scan of
// the deliveries.
func ListLanes(ctx context.Context, q journal.Querier, target string, blocked bool, after string, limit int) ([]LaneWithHead, error) {
	sql := `SELECT ` + laneColumns + `, coalesce(d.state, '') FROM lanes l
		LEFT JOIN LATERAL (SELECT state FROM deliveries d WHERE d.id = l.head_delivery_id OFFSET 0) d ON true
		WHERE l.target = $1 AND l.ordering_key > $2`
	if blocked {
		sql += ` AND l.waiting > 0`
	}
	sql += ` ORDER BY l.ordering_key LIMIT $3`
	rows, err := q.Query(ctx, sql, target, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list lanes of %s: %w", target, err)
	}
	var (
		out   []LaneWithHead
		r     laneRow
		state string
	)
	_, err = pgx.ForEachRow(rows, append(r.dest(), &state), func() error {
		out = append(out, LaneWithHead{Lane: r.lane(), HeadState: lifecycle.DeliveryState(state)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list lanes of %s: %w", target, err)
	}
	return out, nil
}
