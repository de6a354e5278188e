package projection

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// MessageFilter chooses a page of the messages list. The REST API and the
// console both read the list through it, so they list the same messages on
// the same indexes. The surfaces check their input; the zero value of a
// field leaves it out.
type MessageFilter struct {
	Status lifecycle.MessageStatus
	Source string
	// Sources, when not empty, keeps the messages of any of them: the
	// reach of a token scoped to sources.
	Sources []string
	// Target keeps the messages with a delivery to it.
	Target string
	// OrderingKey keeps the messages with that ordering key.
	OrderingKey string
	// Type, From, To and IdempotencyKey keep the messages with exactly
	// that type, parties and idempotency key.
	Type, From, To, IdempotencyKey string
	// PossibleDuplicate keeps the messages that are possible duplicates of
	// an earlier one.
	PossibleDuplicate bool
	// CreatedAfter and CreatedBefore bound created_at, both exclusive.
	CreatedAfter, CreatedBefore time.Time
	// Limit is the page's size; at least 1.
	Limit int
	// After continues the list after a page; nil for the first page.
	After *Cursor
}

// Cursor is where a page of messages ended: the (created_at, id) of its
// last message.
type Cursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// String is the cursor as the lists hand it out: microseconds since 1970
// and the id, as unpadded base64url, opaque to clients.
func (c Cursor) String() string { return encodeCursor("m1", c.CreatedAt, c.ID) }

// ParseCursor reads a cursor String gave; anything else is a
// *lifecycle.FieldError on the field cursor.
func ParseCursor(s string) (Cursor, error) {
	at, id, err := parseCursor("m1", s)
	return Cursor{CreatedAt: at, ID: id}, err
}

// encodeCursor is a list's cursor at (at, id); tag names the list, so a
// cursor of one list is refused by another.
func encodeCursor(tag string, at time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s:%d:%s", tag, at.UnixMicro(), id))
}

// parseCursor reads a cursor encodeCursor gave for the list tag; anything
// else is a *lifecycle.FieldError on the field cursor.
func parseCursor(tag, s string) (time.Time, uuid.UUID, error) {
	bad := &lifecycle.FieldError{Field: "cursor", Problem: "is not a cursor of this list: pass next_cursor as it was given"}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, uuid.Nil, bad
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != tag {
		return time.Time{}, uuid.Nil, bad
	}
	micros, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := uuid.Parse(parts[2])
	at, ok := cursorTime(micros)
	if err1 != nil || err2 != nil || !ok {
		return time.Time{}, uuid.Nil, bad
	}
	return at, id, nil
}

// cursorTime is the time of a cursor's microseconds, and whether a list
// could have handed it out: a created_at is within the years 1 to 9999,
// as RFC 3339 writes times, while one far outside them would overflow the
// timestamptz the query compares it with, or wrap around to the newest.
func cursorTime(micros int64) (time.Time, bool) {
	at := time.UnixMicro(micros).UTC()
	return at, at.Year() >= 1 && at.Year() <= 9999
}

// TxBeginner is what ListMessages needs of a pool: a transaction of its own.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// ListMessages reads a page of the messages f chooses, newest first, by
// (created_at, id) descending, each with all its deliveries, and the
// cursor of the next page (nil on the last). It walks the messages_created
// index or, with a status or source, messages_status_created or
// messages_source_created, with an ordering key
// messages_ordering_key_created, and of the possible duplicates
// messages_possible_duplicate_created, with a type, a party or an
// idempotency key messages_type_created, messages_from_created,
// messages_to_created or messages_idempotency_key_created. With a target it walks that target's deliveries
// on deliveries_target_message, which holds their messages' (created_at,
// id), so a target with few messages costs no more than one with many.
func ListMessages(ctx context.Context, db TxBeginner, f MessageFilter) ([]*Message, *Cursor, error) {
	sql, args, limit := listSQL(f)
	var page []*Message
	// One snapshot for the page and its deliveries, so every item is as it
	// was when the page was chosen.
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				return err
			}
			loaded, err := LoadMany(ctx, tx, ids)
			if err != nil {
				return err
			}
			byID := make(map[uuid.UUID]*Message, len(loaded))
			for _, m := range loaded {
				byID[m.ID] = m
			}
			for _, id := range ids {
				if m := byID[id]; m != nil {
					page = append(page, m)
				}
			}
			return nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("list messages: %w", err)
	}
	if len(page) <= limit {
		return page, nil, nil
	}
	last := page[limit-1]
	return page[:limit], &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}

// listSQL is the query of a page of ListMessages, its arguments and the
// page's size.
func listSQL(f MessageFilter) (string, []any, int) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	from, createdAt, id := "messages m", "m.created_at", "m.id"
	if f.Target != "" {
		from, createdAt, id = "deliveries d JOIN messages m ON m.id = d.message_id", "d.message_created_at", "d.message_id"
		where = append(where, "d.target = "+arg(f.Target))
	}
	if f.Status != "" {
		where = append(where, "m.status = "+arg(f.Status))
	}
	if f.Source != "" {
		where = append(where, "m.source = "+arg(f.Source))
	}
	if len(f.Sources) > 0 {
		where = append(where, "m.source = ANY("+arg(f.Sources)+")")
	}
	if f.OrderingKey != "" {
		where = append(where, "m.ordering_key = "+arg(f.OrderingKey))
	}
	if f.PossibleDuplicate {
		where = append(where, "m.possible_duplicate_of IS NOT NULL")
	}
	// Each has an index on (column, created_at, id), which the page walks.
	for _, c := range []struct{ column, value string }{
		{"m.type", f.Type}, {"m.from_party", f.From}, {"m.to_party", f.To}, {"m.idempotency_key", f.IdempotencyKey},
	} {
		if c.value != "" {
			where = append(where, c.column+" = "+arg(c.value))
		}
	}
	if !f.CreatedAfter.IsZero() {
		where = append(where, createdAt+" > "+arg(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, createdAt+" < "+arg(f.CreatedBefore))
	}
	if f.After != nil {
		where = append(where, "("+createdAt+", "+id+") < ("+arg(f.After.CreatedAt)+", "+arg(f.After.ID)+")")
	}
	limit := max(f.Limit, 1)
	sql := "SELECT m.id FROM " + from
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY " + createdAt + " DESC, " + id + " DESC LIMIT " + arg(limit+1)
	return sql, args, limit
}
