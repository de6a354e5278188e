package feed

import (
	"context"
	stdsql "database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/schema"
)

// topic is the one topic of the feed: the journal. The subscriber checks its
// spelling; the queries name the journal table themselves.
const topic = "journal"

// offsetsTable is where the offsets adapter keeps each group's place.
const offsetsTable = "feed_offsets"

// batchSize is how many events one read takes. A group's place is saved
// once per read, so a crash redelivers at most this many.
const batchSize = 500

// errReadOnly is the refusal of every insert: only the commands write the
// journal, together with the projections.
var errReadOnly = errors.New("feed: the journal is written only by the commands, never through the feed")

// journalSchema is the SchemaAdapter over the journal table. Its reads follow
// DefaultPostgreSQLSchema with txid for transaction_id and position for
// offset, so the offsets adapter's (transaction_id, offset) cursor applies.
type journalSchema struct{}

// SchemaInitializingQueries only takes the lock: schema.Ensure owns the
// journal. The offsets adapter adds its own table after it.
func (journalSchema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{Query: fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(schema.KeyFeedInit))}}, nil
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
// later. The statement is the journal's (journal.TransactionsSQL); the
// adapter gives it the group's place from the offsets query, which locks
// the group's row for the read, in the same statement, as watermill's
// SchemaAdapter takes SQL text.
//
// The events come one row per transaction, so that the subscriber's work
// per message (a goroutine hand-off, an ack) is paid once for all the
// events a command batch wrote, not for each. A transaction the read's
// limit cuts comes in two messages: its rest opens the next read.
func (journalSchema) SelectQuery(p wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := p.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: p.Topic, ConsumerGroup: p.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, fmt.Errorf("feed: next offset query: %w", err)
	}
	q := `WITH last_processed AS (` + next.Query + `) ` + journal.TransactionsSQL(
		`(SELECT last_processed_transaction_id FROM last_processed)`, `(SELECT offset_acked FROM last_processed)`, batchSize)
	return wsql.Query{Query: q, Args: next.Args}, nil
}

// walkingPool begins the subscriber's transactions, in which it reads the
// journal with SelectQuery, under walkPlan, in the round trip of the BEGIN.
// The read's place comes from a subquery, so the planner guesses the
// range's size: when it guessed a few thousand rows and the group lagged
// more, it fetched every lagging event by a bitmap scan and sorted them
// for the first 500, 4 to 17 ms a read where the walk takes 0.5.
//
// Their commit, which saves the group's place, does not wait for the WAL
// to reach the disk: a place lost in a crash only makes the group read
// again what it had acked, as a crash before the commit does, and a read
// then adds no flush to those the commands' commits wait for.
type walkingPool struct{ *pgxpool.Pool }

// BeginTx implements wsql.Conn.
func (p walkingPool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	begin := []string{"BEGIN"}
	if opts.IsoLevel != "" {
		begin = append(begin, "ISOLATION LEVEL", string(opts.IsoLevel))
	}
	if opts.AccessMode != "" {
		begin = append(begin, string(opts.AccessMode))
	}
	if opts.DeferrableMode != "" {
		begin = append(begin, string(opts.DeferrableMode))
	}
	// Without arguments pgx sends the query by the simple protocol, which
	// takes the three statements at once.
	opts.BeginQuery = strings.Join(begin, " ") + "; " + walkPlan + "; SET LOCAL synchronous_commit = off"
	return p.Pool.BeginTx(ctx, opts)
}

// UnmarshalMessage turns the row of a transaction into a message: its
// events encoded in the payload (see appendEvent), the last position as
// its UUID and offset, and the txid for the offsets adapter. Decoding and
// the envelope check are the consumer's (see decodeEvents).
func (journalSchema) UnmarshalMessage(p wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var (
		txid       wsql.XID8
		positions  []int64
		recordedAt []time.Time
		streams    []string
		versions   []int32
		deliveries []pgtype.UUID
		targets    []string
		kinds      []string
		actors     []string
		olds, news []string
		payloads   [][]byte
	)
	if err := p.Row.Scan(&txid, &positions, &recordedAt, &streams, &versions, &deliveries, &targets,
		&kinds, &actors, &olds, &news, &payloads); err != nil {
		return wsql.Row{}, fmt.Errorf("feed: scan journal rows: %w", err)
	}
	n := len(positions)
	if n == 0 || len(recordedAt) != n || len(streams) != n || len(versions) != n || len(deliveries) != n ||
		len(targets) != n || len(kinds) != n || len(actors) != n || len(olds) != n || len(news) != n || len(payloads) != n {
		return wsql.Row{}, fmt.Errorf("feed: transaction %v: columns of unequal length", txid)
	}
	// Sized once: grown by appends, the buffer of a large transaction
	// was copied about twice over.
	size := 0
	for i := range n {
		size += maxEventHeader + len(streams[i]) + len(targets[i]) + len(kinds[i]) + len(actors[i]) +
			len(olds[i]) + len(news[i]) + len(payloads[i])
	}
	b := make([]byte, 0, size)
	for i := range n {
		b = appendEvent(b, encodedEvent{position: positions[i], recordedAt: recordedAt[i], stream: streams[i],
			version: versions[i], deliveryID: deliveries[i], target: targets[i], kind: kinds[i], actor: actors[i],
			oldState: olds[i], newState: news[i], payload: payloads[i]})
	}
	last := positions[n-1]
	id := strconv.FormatInt(last, 10)
	return wsql.Row{
		Offset:    last,
		UUID:      []byte(id),
		Payload:   b,
		Msg:       message.NewMessage(id, b),
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
