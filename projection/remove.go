package projection

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// QueueRemove queues on b, in a transaction that holds the messages' rows
// locked, the deletion of the messages and their deliveries, and takes
// their deliveries off the counts by state. ms must be as stored: the
// counts go down by the states they hold. Retention calls it in the
// transaction that removes the messages' streams from the journal, so the
// tables and the journal stay each other's fold.
func QueueRemove(b *pgx.Batch, ms []*Message) {
	ids := make([]uuid.UUID, len(ms))
	counts := map[lifecycle.DeliveryState]int64{}
	for i, m := range ms {
		ids[i] = m.ID
		for _, d := range m.Deliveries {
			counts[d.State]--
		}
	}
	b.Queue(`DELETE FROM deliveries WHERE message_id = ANY($1::uuid[])`, ids)
	b.Queue(`DELETE FROM messages WHERE id = ANY($1::uuid[])`, ids)
	queueCounts(b, counts)
}
