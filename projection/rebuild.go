package projection

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/schema"
)

// Rebuild recreates the messages and deliveries tables from the journal
// alone: it folds the whole journal in memory, resets the projections and
// loads the fold with COPY, then audits the result (the fold has checked
// every event; the tables are compared with it). It holds the server lock
// alone throughout, so it refuses while any server runs (schema.ErrDatabaseInUse).
// An event the fold refuses is reported and left out, as the audit does.
func Rebuild(ctx context.Context, db *pgxpool.Pool) (*Report, error) {
	return rebuild(ctx, db, defaultReading)
}

func rebuild(ctx context.Context, db *pgxpool.Pool, rd reading) (*Report, error) {
	lock, err := schema.LockExclusive(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	defer lock.Release()
	s, err := openSnapshot(ctx, db, rd.connections)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	f, err := foldSnapshot(ctx, s, rd)
	s.close()
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if err := copyFolded(ctx, db, f); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	r, err := checkTables(ctx, db, f, uuid.Nil)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	return r, nil
}

func copyFolded(ctx context.Context, db *pgxpool.Pool, f *Folded) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		messages := make([][]any, 0, len(f.Messages))
		var deliveries deliveryColumnsOf
		for _, m := range f.Messages {
			messages = append(messages, []any{m.ID, m.Version, m.Source, m.From, m.To, m.ContentType,
				nullString(m.IdempotencyKey), m.PayloadSize, m.PayloadSHA256, string(m.Stage),
				nullString(string(m.Refusal)), string(m.Status), m.Error, len(m.Deliveries), m.AttemptCount,
				m.CreatedAt, m.UpdatedAt})
			for i := range m.Deliveries {
				deliveries.add(&m.Deliveries[i])
			}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"messages"}, []string{"id", "version", "source", "from_party",
			"to_party", "content_type", "idempotency_key", "payload_size", "payload_sha256", "stage", "refusal",
			"status", "error", "delivery_count", "attempt_count", "created_at", "updated_at"}, pgx.CopyFromRows(messages))
		if err != nil {
			return fmt.Errorf("copy messages: %w", err)
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"deliveries"}, []string{"id", "message_id", "seq", "target",
			"state", "attempts", "dispatch_count", "redeliveries", "next_due", "claim_token", "lease_end",
			"last_error", "created_at", "updated_at", "finished_at"}, &deliveries)
		if err != nil {
			return fmt.Errorf("copy deliveries: %w", err)
		}
		return nil
	})
}

// The deliveries columns are a pgx.CopyFromSource, row by row.
func (c *deliveryColumnsOf) Next() bool {
	c.row++
	return c.row <= len(c.id)
}

func (c *deliveryColumnsOf) Values() ([]any, error) {
	i := c.row - 1
	return []any{c.id[i], c.messageID[i], c.seq[i], c.target[i], c.state[i], c.attempts[i], c.dispatches[i],
		c.redelivs[i], c.nextDue[i], c.claimToken[i], c.leaseEnd[i], c.lastError[i], c.createdAt[i],
		c.updatedAt[i], c.finishedAt[i]}, nil
}

func (c *deliveryColumnsOf) Err() error { return nil }
