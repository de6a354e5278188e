package projection

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
)

// Violation is one disagreement the audit found: an event the fold refuses,
// or a stored row that is not what the journal folds to.
type Violation struct {
	// Position is the event's, for an event the fold refused; 0 for a row.
	Position   int64
	MessageID  uuid.UUID
	DeliveryID uuid.UUID
	Problem    string
}

func (v Violation) String() string {
	s := ""
	if v.Position > 0 {
		s = fmt.Sprintf("position %d: ", v.Position)
	}
	s += "message " + v.MessageID.String()
	if v.DeliveryID != uuid.Nil {
		s += " delivery " + v.DeliveryID.String()
	}
	return s + ": " + v.Problem
}

// Report is what an audit checked and found.
type Report struct {
	Events     int
	Messages   int
	Deliveries int
	Violations []Violation
}

// Folded is the state of every message stream the journal holds.
type Folded struct {
	Messages   map[uuid.UUID]*Message
	Events     int
	Violations []Violation
}

// FoldJournal replays the journal, or one message's stream when message is
// not uuid.Nil, through Apply. An event Apply refuses is reported and
// skipped, so the rest of its stream is still checked.
func FoldJournal(ctx context.Context, q journal.Querier, message uuid.UUID) (*Folded, error) {
	f := &Folded{Messages: map[uuid.UUID]*Message{}}
	fold := func(e journal.Event) error {
		f.Events++
		if e.Stream == journal.ConfigStream {
			return nil
		}
		id, err := uuid.Parse(e.Stream)
		if err != nil {
			f.Violations = append(f.Violations, Violation{Position: e.Position, Problem: fmt.Sprintf("stream %q is not a message id", e.Stream)})
			return nil
		}
		m := f.Messages[id]
		if m == nil {
			m = &Message{}
		}
		if err := Apply(m, e); err != nil {
			f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: err.Error()})
			return nil
		}
		f.Messages[id] = m
		return nil
	}
	if message != uuid.Nil {
		events, err := journal.Stream(ctx, q, journal.MessageStream(message))
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			_ = fold(e)
		}
		return f, nil
	}
	return f, journal.Scan(ctx, q, 1, fold)
}

// Audit replays the journal (or one message's stream) and checks every
// event against the fold and the fold's result against the stored tables.
// It reads everything in one read-only snapshot, so commands committing
// meanwhile do not show up as differences.
func Audit(ctx context.Context, db *pgxpool.Pool, message uuid.UUID) (*Report, error) {
	var r *Report
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			f, err := FoldJournal(ctx, tx, message)
			if err != nil {
				return err
			}
			r, err = checkTables(ctx, tx, f, message)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return r, nil
}

// checkTables compares the stored rows (of one message, unless message is
// uuid.Nil) with the fold f and reports with f's own violations.
func checkTables(ctx context.Context, q journal.Querier, f *Folded, message uuid.UUID) (*Report, error) {
	r := &Report{Events: f.Events, Violations: f.Violations}
	where, args := "", []any{}
	if message != uuid.Nil {
		where, args = " WHERE m.id = $1", []any{message}
	}
	stored := map[uuid.UUID]*Message{}
	err := scanRows(ctx, q, `SELECT `+messageColumns+` FROM messages m`+where, args, func(rows pgx.Rows) error {
		var m Message
		if err := rows.Scan(m.scanDest()...); err != nil {
			return err
		}
		m.normalize()
		stored[m.ID] = &m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit messages: %w", err)
	}
	where = ""
	if message != uuid.Nil {
		where = " WHERE d.message_id = $1"
	}
	err = scanRows(ctx, q, `SELECT `+deliveryColumns+` FROM deliveries d`+where+` ORDER BY d.message_id, d.seq`, args, func(rows pgx.Rows) error {
		var d deliveryRow
		if err := rows.Scan(d.scanDest()...); err != nil {
			return err
		}
		r.Deliveries++
		del := d.delivery()
		m := stored[del.MessageID]
		if m == nil {
			r.Violations = append(r.Violations, Violation{MessageID: del.MessageID, DeliveryID: del.ID, Problem: "stored delivery of no stored message"})
			return nil
		}
		m.Deliveries = append(m.Deliveries, del)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit deliveries: %w", err)
	}
	r.Messages = len(stored)
	for id, want := range f.Messages {
		got := stored[id]
		if got == nil {
			r.Violations = append(r.Violations, Violation{MessageID: id, Problem: "in the journal but not in the messages table"})
			continue
		}
		r.Violations = append(r.Violations, Compare(got, want)...)
	}
	for id := range stored {
		if f.Messages[id] == nil {
			r.Violations = append(r.Violations, Violation{MessageID: id, Problem: "in the messages table but not in the journal"})
		}
	}
	return r, nil
}

func scanRows(ctx context.Context, q journal.Querier, sql string, args []any, fn func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Compare lists every field in which the stored state differs from the
// folded one.
func Compare(stored, folded *Message) []Violation {
	var out []Violation
	for _, p := range diffFields(*stored, *folded, "Deliveries") {
		out = append(out, Violation{MessageID: folded.ID, Problem: p})
	}
	byID := map[uuid.UUID]Delivery{}
	for _, d := range stored.Deliveries {
		byID[d.ID] = d
	}
	for _, want := range folded.Deliveries {
		got, ok := byID[want.ID]
		if !ok {
			out = append(out, Violation{MessageID: folded.ID, DeliveryID: want.ID, Problem: "in the journal but not in the deliveries table"})
			continue
		}
		delete(byID, want.ID)
		for _, p := range diffFields(got, want) {
			out = append(out, Violation{MessageID: folded.ID, DeliveryID: want.ID, Problem: p})
		}
	}
	for id := range byID {
		out = append(out, Violation{MessageID: folded.ID, DeliveryID: id, Problem: "in the deliveries table but not in the journal"})
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// diffFields compares two structs of one type field by field, times by
// instant, skipping the named fields.
func diffFields(stored, folded any, skip ...string) []string {
	a, b := reflect.ValueOf(stored), reflect.ValueOf(folded)
	var out []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if slices.Contains(skip, f.Name) {
			continue
		}
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		same := reflect.DeepEqual(x, y)
		if f.Type == timeType {
			same = x.(time.Time).Equal(y.(time.Time))
		}
		if !same {
			out = append(out, fmt.Sprintf("%s is %v in the table, %v by the journal", f.Name, x, y))
		}
	}
	return out
}
