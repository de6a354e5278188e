package projection

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
)

// QueueRemove queues on b, in a transaction that holds the messages' rows
// locked, the deletion of the messages and of every row they have in the
// projections: their payloads, their deliveries, their outcome callbacks, and the
// correlations of receivers' ids one of their deliveries holds (a
// correlation another delivery took since stays); and the messages leave
// the kept counts (Tally), their outcomes by the minute with them. events are the messages' whole streams, which
// name those ids; ms must be as stored, as the counts hold them. Retention
// calls it in the transaction that removes the streams from the journal,
// so the tables and the journal stay each other's fold.
func QueueRemove(b *pgx.Batch, ms []*Message, events []journal.Event) {
	ids := make([]uuid.UUID, len(ms))
	var tally Tally
	byStream := map[string]*Message{}
	for i, m := range ms {
		ids[i] = m.ID
		tally.Add(m, -1)
		byStream[journal.MessageStream(m.ID)] = m
	}
	for i := range events {
		if m := byStream[events[i].Stream]; m != nil {
			tally.addOutcome(&events[i], m.CreatedAt, -1)
		}
	}
	keys := map[CorrelationKey]bool{}
	for _, e := range events {
		if key, _, ok := Correlates(e, uuid.Nil); ok {
			keys[key] = true
		}
	}
	QueueDeletePayloads(b, ids)
	b.Queue(`DELETE FROM deliveries WHERE message_id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM messages WHERE id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM callbacks WHERE message_id = ANY($1::uuid[])`, ids)
	if len(keys) > 0 {
		sorted := slices.SortedFunc(maps.Keys(keys), compareKeys)
		targets, externalIDs := make([]string, len(sorted)), make([]string, len(sorted))
		for i, k := range sorted {
			targets[i], externalIDs[i] = k.Target, k.ExternalID
		}
		b.Queue(`DELETE FROM correlations c USING unnest($1::text[], $2::text[]) AS k(target, external_id)
			WHERE c.target = k.target AND c.external_id = k.external_id AND c.message_id = ANY($3::uuid[])`,
			targets, externalIDs, ids)
	}
	tally.Queue(b)
}

// QueueCountMessages queues on b the count, into dst, of the messages of
// ids that have a row.
func QueueCountMessages(b *pgx.Batch, ids []uuid.UUID, dst *int) {
	b.Queue(`SELECT count(*) FROM messages WHERE id = ANY($1::uuid[])`, ids).
		QueryRow(func(row pgx.Row) error { return row.Scan(dst) })
}

// OpenLanes reports which of the lanes named have a row: a head, or
// deliveries waiting. A settled message with a delivery in an open lane
// stays: its lane's history is still being written, and the audit and the
// rebuild fold a lane from its first event since it last emptied.
func OpenLanes(ctx context.Context, q journal.Querier, lanes []LaneID) (map[LaneID]bool, error) {
	out := map[LaneID]bool{}
	if len(lanes) == 0 {
		return out, nil
	}
	targets, keys := make([]string, len(lanes)), make([]string, len(lanes))
	for i, l := range lanes {
		targets[i], keys[i] = l.Target, l.Key
	}
	rows, err := q.Query(ctx, `SELECT l.target, l.ordering_key FROM unnest($1::text[], $2::text[]) AS k(target, key),
		LATERAL (SELECT target, ordering_key FROM lanes l WHERE l.target = k.target AND l.ordering_key = k.key OFFSET 0) l`,
		targets, keys)
	if err != nil {
		return nil, fmt.Errorf("read open lanes: %w", err)
	}
	var id LaneID
	_, err = pgx.ForEachRow(rows, []any{&id.Target, &id.Key}, func() error {
		out[id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read open lanes: %w", err)
	}
	return out, nil
}

// Lanes lists the lanes the message's deliveries were placed in, of every
// generation.
func (m *Message) Lanes() []LaneID {
	var out []LaneID
	for i := range m.Deliveries {
		if d := &m.Deliveries[i]; d.LaneSeq > 0 && !slices.Contains(out, LaneID{d.Target, d.LaneKey}) {
			out = append(out, LaneID{d.Target, d.LaneKey})
		}
	}
	return out
}
