package feed

import (
	"context"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OnPoll makes c call f after every read of the journal, whether it found
// events or not; set it before Start.
func (c *Consumer) OnPoll(f func()) { c.polled = f }

// LagSQL and WalkPlan are the lag's query and the settings it runs under.
var LagSQL, WalkPlan = lagSQL, walkPlan

// ReadSQL is the query by which group reads the journal, with its
// arguments.
func ReadSQL(group string) (string, []any, error) {
	q, err := journalSchema{}.SelectQuery(wsql.SelectQueryParams{Topic: topic, ConsumerGroup: group, OffsetsAdapter: offsets})
	return q.Query, q.Args, err
}

// BeginRead begins a transaction as the subscriber begins those it reads in.
func BeginRead(ctx context.Context, db *pgxpool.Pool) (pgx.Tx, error) {
	return walkingPool{db}.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadWrite})
}
