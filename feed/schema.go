package feed

import (
	stdsql "database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// topic is the one topic of the feed: the journal. The subscriber checks its
// spelling; the queries name the journal table themselves.
const topic = "journal"

// offsetsTable is where the offsets adapter keeps each group's place.
const offsetsTable = "feed_offsets"

// batchSize is how many events one read takes. A group's place is saved once
// per read, so a crash redelivers at most this many.
const batchSize = 100

// initLock serialises the creation of the offsets table by consumers starting
// at once, as DefaultPostgreSQLSchema does with its own lock.
const initLock = 0x77617962696c6c03

// errReadOnly is the refusal of every insert: only the commands write the
// journal, together with the projections.
var errReadOnly = errors.New("feed: the journal is written only by the commands, never through the feed")

// The metadata keys that carry the journal columns besides the payload.
const (
	metaRecordedAt = "recorded_at"
	metaStream     = "stream"
	metaVersion    = "version"
	metaDeliveryID = "delivery_id"
	metaTarget     = "target"
	metaKind       = "kind"
	metaActor      = "actor"
	metaOldState   = "old_state"
	metaNewState   = "new_state"
)

// journalSchema is the SchemaAdapter over the journal table. Its reads follow
// DefaultPostgreSQLSchema with txid for transaction_id and position for
// offset, so the offsets adapter's (transaction_id, offset) cursor applies.
type journalSchema struct{}

// SchemaInitializingQueries only takes the lock: schema.Ensure owns the
// journal. The offsets adapter adds its own table after it.
func (journalSchema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(initLock))}}, nil
}

// RequiresTransaction makes the subscriber initialise in a transaction, so the
// lock holds while the offsets table is created.
func (journalSchema) RequiresTransaction() bool { return true }

// InsertQuery refuses: see errReadOnly.
func (journalSchema) InsertQuery(wsql.InsertQueryParams) (wsql.Query, error) {
	return wsql.Query{}, errReadOnly
}

// SelectQuery returns the next events after the group's place, in
// (txid, position) order, from transactions below the snapshot's xmin:
// every one of those has ended, so no event can appear behind the place
// later. The offsets query locks the group's row for the read.
func (journalSchema) SelectQuery(p wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := p.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: p.Topic, ConsumerGroup: p.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, fmt.Errorf("feed: next offset query: %w", err)
	}
	// The row comparison is a range of the journal_txid index, which the
	// scan walks in order from the group's place and leaves after
	// batchSize rows, whatever the backlog.
	q := `WITH last_processed AS (` + next.Query + `)
	SELECT position, txid, recorded_at, stream, version, delivery_id, coalesce(target, ''),
		kind, actor, coalesce(old_state, ''), coalesce(new_state, ''), payload
	FROM journal
	WHERE (txid, position) > ((SELECT last_processed_transaction_id FROM last_processed),
			(SELECT offset_acked FROM last_processed))
		AND txid < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY txid, position
	LIMIT ` + strconv.Itoa(batchSize)
	return wsql.Query{Query: q, Args: next.Args}, nil
}

// UnmarshalMessage turns a row into a message: the payload as stored, the
// other columns as metadata, the position as its UUID and offset. Decoding
// and the envelope check are the consumer's (see decode).
func (journalSchema) UnmarshalMessage(p wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var (
		position   int64
		txid       wsql.XID8
		recordedAt time.Time
		stream     string
		version    int
		deliveryID pgtype.UUID
		target     string
		kind       string
		actor      string
		old, new   string
		payload    []byte
	)
	if err := p.Row.Scan(&position, &txid, &recordedAt, &stream, &version, &deliveryID, &target,
		&kind, &actor, &old, &new, &payload); err != nil {
		return wsql.Row{}, fmt.Errorf("feed: scan journal row: %w", err)
	}
	id := strconv.FormatInt(position, 10)
	msg := message.NewMessage(id, payload)
	msg.Metadata = message.Metadata{
		metaRecordedAt: recordedAt.UTC().Format(time.RFC3339Nano),
		metaStream:     stream,
		metaVersion:    strconv.Itoa(version),
		metaKind:       kind,
		metaActor:      actor,
		metaTarget:     target,
		metaOldState:   old,
		metaNewState:   new,
	}
	if deliveryID.Valid {
		msg.Metadata[metaDeliveryID] = uuid.UUID(deliveryID.Bytes).String()
	}
	return wsql.Row{
		Offset:    position,
		UUID:      []byte(id),
		Payload:   payload,
		Msg:       msg,
		ExtraData: map[string]any{"transaction_id": txid},
	}, nil
}

// SubscribeIsolationLevel is repeatable read, as for DefaultPostgreSQLSchema.
func (journalSchema) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelRepeatableRead
}

// offsets is the offsets adapter of every group, over feed_offsets.
var offsets = wsql.DefaultPostgreSQLOffsetsAdapter{
	GenerateMessagesOffsetsTableName: func(string) string { return offsetsTable },
}
