package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// ExpungePayload drops the payload bytes of a message that r makes due at
// the Writer's clock (lifecycle.Retention.PayloadDue, from the message's
// last transition): it records message.payload_expunged, actor retention,
// and deletes the payloads row in the same transaction. It reports whether
// it did; false, with no error, for a message that is not due, or no
// longer, since an operator reopened it after retention chose it.
func (w *Writer) ExpungePayload(ctx context.Context, id uuid.UUID, r lifecycle.Retention) (bool, error) {
	if r.PayloadAfter == nil {
		return false, invalid(&lifecycle.FieldError{Field: "retention.payload_after", Problem: "is required to expunge a payload"})
	}
	var done bool
	_, err := w.run(ctx, message(id), func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		done = false
		if m.PayloadExpunged || !r.PayloadDue(m.Status, m.UpdatedAt, now) {
			return nil, nil
		}
		c := newChange(m)
		err := c.record(journal.Event{RecordedAt: now, Actor: journal.ActorRetention,
			Payload: &journal.MessagePayloadExpunged{PayloadSize: m.PayloadSize, PayloadSHA256: m.PayloadSHA256, After: *r.PayloadAfter}})
		if err != nil {
			return nil, err
		}
		c.also(func(b *pgx.Batch) { projection.QueueDeletePayloads(b, []uuid.UUID{m.ID}) })
		done = true
		return c, nil
	})
	if err != nil {
		return false, fmt.Errorf("expunge payload of message %s: %w", id, err)
	}
	return done, nil
}
