package projection

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// CorrelationKey is a receiver's own id for a message. It is unique per
// target: two targets may use one id.
type CorrelationKey struct {
	Target, ExternalID string
}

// Correlation is the delivery a receiver's id names, and whether a final
// receipt by that id came already (Consumed): a later one is refused.
type Correlation struct {
	DeliveryID, MessageID uuid.UUID
	Consumed              bool
}

// Correlates is the change e, an event of message, makes to the
// correlations: a hand-over that took the receiver's id makes that id's
// correlation, open, moving it to this delivery when another had it; a
// final receipt by the id (received or refused) consumes it. ok is false
// for every other event. The commands' batch keeps, by it, the
// correlations its earlier commands left, for a later receipt by id.
func Correlates(e journal.Event, message uuid.UUID) (key CorrelationKey, c Correlation, ok bool) {
	var id string
	consumed := false
	switch p := e.Payload.(type) {
	case *journal.DeliveryAttempted:
		id = p.Outcome.ExternalID
	case *journal.ReceiptReceived:
		id, consumed = p.ExternalID, true
	case *journal.ReceiptRefused:
		id, consumed = p.ExternalID, true
	}
	if id == "" {
		return key, c, false
	}
	return CorrelationKey{e.Target, id}, Correlation{DeliveryID: e.DeliveryID, MessageID: message, Consumed: consumed}, true
}

// correlate folds e, an event of message the fold accepted, into the
// correlations as the projector writes them, and returns what is wrong
// with a receipt by a receiver's id: a final one must consume its
// delivery's open correlation, an intermediate one must name its
// delivery's correlation while it is open.
//
// A key's correlation is the one its event of the greatest position made,
// whatever the order events are folded in (at keeps that position): the
// projector upserts the row before it appends the events, so of two
// transactions that take one key the second waits for the first's commit
// and appends after it. An online rebuild's catch-up folds in the order
// of transaction ids, which such a pair may hold the other way round.
//
// handed keeps each delivery's last hand-over, by which a negative receipt
// refused as superseded (journal.ReceiptRefused.SupersededBy) must name
// the delivery's last hand-over, made under an id not the receipt's: one
// later than the hand-over that gave the receipt's id, which is the
// delivery's open correlation.
func correlate(all map[CorrelationKey]Correlation, at map[CorrelationKey]int64, handed map[uuid.UUID]journal.HandOver,
	e journal.Event, message uuid.UUID) string {
	var problem string
	check := func(id string) {
		c, ok := all[CorrelationKey{e.Target, id}]
		if !ok || c.DeliveryID != e.DeliveryID || c.Consumed {
			problem = fmt.Sprintf("a receipt by id %q of %s, which is not the delivery's open correlation", id, e.Target)
		}
	}
	switch p := e.Payload.(type) {
	case *journal.ReceiptReceived:
		if p.ExternalID != "" {
			check(p.ExternalID)
		}
	case *journal.ReceiptRefused:
		if p.ExternalID != "" {
			check(p.ExternalID)
		}
		if h := handed[e.DeliveryID]; p.SupersededBy > 0 && problem == "" && (h.Version != p.SupersededBy || h.ExternalID == p.ExternalID) {
			problem = fmt.Sprintf("a receipt by id %q of %s refused as superseded by version %d, which is not the delivery's last hand-over under another id",
				p.ExternalID, e.Target, p.SupersededBy)
		}
	case *journal.ReceiptIntermediate:
		check(p.ExternalID)
	case *journal.DeliveryAttempted:
		if p.Outcome.Kind == lifecycle.OutcomeAwaitingAck && e.Version > handed[e.DeliveryID].Version {
			handed[e.DeliveryID] = journal.HandOver{Version: e.Version, Attempt: p.Attempt, ExternalID: p.Outcome.ExternalID}
		}
	}
	if key, c, ok := Correlates(e, message); ok && e.Position >= at[key] {
		all[key], at[key] = c, e.Position
	}
	return problem
}

// queueCorrelations queues the upsert of the correlations the writes'
// events change, each as the last of them leaves it, in key order, so
// that two writers cannot wait for each other's rows in a cycle.
func queueCorrelations(b *pgx.Batch, writes []Write) {
	changed := map[CorrelationKey]Correlation{}
	for _, w := range writes {
		for _, e := range w.Events {
			if key, c, ok := Correlates(e, w.Message.ID); ok {
				changed[key] = c
			}
		}
	}
	if len(changed) == 0 {
		return
	}
	keys := slices.SortedFunc(maps.Keys(changed), compareKeys)
	var (
		targets, ids         = make([]string, len(keys)), make([]string, len(keys))
		deliveries, messages = make([]uuid.UUID, len(keys)), make([]uuid.UUID, len(keys))
		consumed             = make([]bool, len(keys))
	)
	for i, k := range keys {
		c := changed[k]
		targets[i], ids[i], deliveries[i], messages[i], consumed[i] = k.Target, k.ExternalID, c.DeliveryID, c.MessageID, c.Consumed
	}
	b.Queue(upsertCorrelationsSQL, targets, ids, deliveries, messages, consumed)
}

func compareKeys(a, b CorrelationKey) int {
	return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.ExternalID, b.ExternalID))
}

const upsertCorrelationsSQL = `INSERT INTO correlations (target, external_id, delivery_id, message_id, consumed)
	SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::uuid[], $5::boolean[])
	ON CONFLICT (target, external_id) DO UPDATE SET delivery_id = excluded.delivery_id,
		message_id = excluded.message_id, consumed = excluded.consumed`

// LoadCorrelation reads the correlation of a receiver's id;
// ErrNotFound when there is none.
func LoadCorrelation(ctx context.Context, q journal.Querier, key CorrelationKey) (Correlation, error) {
	rows, err := q.Query(ctx, `SELECT delivery_id, message_id, consumed FROM correlations WHERE target = $1 AND external_id = $2`,
		key.Target, key.ExternalID)
	if err != nil {
		return Correlation{}, fmt.Errorf("load correlation: %w", err)
	}
	c, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (Correlation, error) {
		var c Correlation
		return c, r.Scan(&c.DeliveryID, &c.MessageID, &c.Consumed)
	})
	if err == pgx.ErrNoRows {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("load correlation: %w", err)
	}
	return c, nil
}

// QueueCorrelation queues on b the read of a receiver's id's correlation,
// locking its row until the transaction ends, into c; c is left as it was
// when there is none.
func QueueCorrelation(b *pgx.Batch, key CorrelationKey, c *Correlation) {
	b.Queue(`SELECT delivery_id, message_id, consumed FROM correlations WHERE target = $1 AND external_id = $2 FOR UPDATE`,
		key.Target, key.ExternalID).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&c.DeliveryID, &c.MessageID, &c.Consumed}, func() error { return nil })
		return err
	})
}

// checkCorrelations compares the correlations table with the fold's.
func checkCorrelations(ctx context.Context, q journal.Querier, f *Folded) ([]Violation, error) {
	stored := map[CorrelationKey]Correlation{}
	var (
		k CorrelationKey
		c Correlation
	)
	err := scanRows(ctx, q, `SELECT target, external_id, delivery_id, message_id, consumed FROM correlations`, nil,
		func(rows pgx.Rows) error {
			if err := rows.Scan(&k.Target, &k.ExternalID, &c.DeliveryID, &c.MessageID, &c.Consumed); err != nil {
				return err
			}
			stored[k] = c
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("audit correlations: %w", err)
	}
	var out []Violation
	bad := func(k CorrelationKey, c Correlation, problem string) {
		out = append(out, Violation{MessageID: c.MessageID, DeliveryID: c.DeliveryID,
			Problem: fmt.Sprintf("correlation %q of %s %s", k.ExternalID, k.Target, problem)})
	}
	for _, k := range slices.SortedFunc(maps.Keys(f.Correlations), compareKeys) {
		want := f.Correlations[k]
		got, ok := stored[k]
		switch {
		case !ok && f.Removed.Batches > 0:
			// Retention deletes a correlation with the message that last
			// took its id, though an earlier live delivery may have had
			// the id before (docs/retention.md): a rebuild gives it back.
		case !ok:
			bad(k, want, "is in the journal but not in the correlations table")
		case got != want:
			bad(k, want, fmt.Sprintf("is %+v in the table, %+v by the journal", got, want))
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(stored), compareKeys) {
		if _, ok := f.Correlations[k]; !ok {
			bad(k, stored[k], "is in the correlations table but not in the journal")
		}
	}
	return out, nil
}
