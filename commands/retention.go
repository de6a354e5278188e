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

// ExpungePayload drops the payload bytes of a message that the retention
// settings in force make due at the Writer's clock
// (lifecycle.Retention.PayloadDue, from the message's last transition): it
// records message.payload_expunged, actor retention, and deletes the
// payloads row in the same transaction. The settings are read in that
// transaction and locked until it ends (QueueSharedSettings), so it never
// commits under a payload_after changed meanwhile. It reports whether it
// did; false, with no error, for a message that is not due, or no longer,
// since an operator reopened it or the settings changed after retention
// chose it.
func (w *Writer) ExpungePayload(ctx context.Context, id uuid.UUID) (bool, error) {
	var (
		settings lifecycle.Settings
		done     bool
	)
	read := func(b *pgx.Batch) { QueueSharedSettings(b, &settings) }
	_, err := w.runReading(ctx, message(id), read, func(m *projection.Message, _ *projection.LaneBook, now time.Time) (*change, error) {
		done = false
		r := settings.Retention
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
