package projection

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
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
	f := newFolded()
	if message != uuid.Nil {
		events, err := journal.Stream(ctx, q, journal.MessageStream(message))
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			_ = f.fold(e)
		}
		return f, nil
	}
	return f, journal.Scan(ctx, q, 1, f.fold)
}

// reading says how Audit and Rebuild read the whole journal: on how many
// connections at once, sharing one snapshot, and how many positions each
// query covers. The tests read in small runs to spread streams over them.
type reading struct {
	connections int
	chunk       int64
	// snapshotTaken, when set, is called once every connection has the
	// snapshot and before anything is read.
	snapshotTaken func()
}

var defaultReading = reading{connections: 3, chunk: 8192}

// foldSnapshot replays the whole journal as of the snapshot s, reading on all
// its transactions at once and folding in position order.
func foldSnapshot(ctx context.Context, s *snapshot, rd reading) (*Folded, error) {
	qs := s.queriers()
	last, err := journal.LastPosition(ctx, qs[0])
	if err != nil {
		return nil, err
	}
	f := newFolded()
	return f, journal.ScanRanges(ctx, qs, 1, last, rd.chunk, f.fold)
}

func newFolded() *Folded { return &Folded{Messages: map[uuid.UUID]*Message{}} }

// fold folds one event; it reports an event Apply refuses and returns nil.
func (f *Folded) fold(e journal.Event) error {
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
		if err := Apply(m, e); err != nil {
			f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: err.Error()})
			return nil
		}
		f.Messages[id] = m
		return nil
	}
	if err := Apply(m, e); err != nil {
		f.Violations = append(f.Violations, Violation{Position: e.Position, MessageID: id, DeliveryID: e.DeliveryID, Problem: err.Error()})
	}
	return nil
}

// Audit replays the journal (or one message's stream) and checks every
// event against the fold and the fold's result against the stored tables.
// It reads everything in one read-only snapshot, so commands committing
// meanwhile do not show up as differences. The whole journal is read on
// several connections at once, all in that snapshot.
func Audit(ctx context.Context, db *pgxpool.Pool, message uuid.UUID) (*Report, error) {
	return audit(ctx, db, message, defaultReading)
}

func audit(ctx context.Context, db *pgxpool.Pool, message uuid.UUID, rd reading) (*Report, error) {
	var r *Report
	if message != uuid.Nil {
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
	s, err := openSnapshot(ctx, db, rd.connections)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer s.close()
	if rd.snapshotTaken != nil {
		rd.snapshotTaken()
	}
	f, err := foldSnapshot(ctx, s, rd)
	if err == nil {
		r, err = checkTables(ctx, s.txs[0], f, uuid.Nil)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return r, nil
}

// checkTables compares the stored rows (of one message, unless message is
// uuid.Nil) with the fold f and reports with f's own violations. It reads
// the messages, then the deliveries, and compares each row as it comes, so
// it holds no copy of the tables.
func checkTables(ctx context.Context, q journal.Querier, f *Folded, message uuid.UUID) (*Report, error) {
	c := newTableCheck(f)
	where, args := "", []any{}
	if message != uuid.Nil {
		where, args = " WHERE m.id = $1", []any{message}
	}
	var m Message
	dest := m.scanDest()
	err := scanRows(ctx, q, `SELECT `+messageColumns+` FROM messages m`+where, args, func(rows pgx.Rows) error {
		m = Message{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		m.normalize()
		c.message(&m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit messages: %w", err)
	}
	where = ""
	if message != uuid.Nil {
		where = " WHERE d.message_id = $1"
	}
	var d deliveryRow
	dest = d.scanDest()
	err = scanRows(ctx, q, `SELECT `+deliveryColumns+` FROM deliveries d`+where, args, func(rows pgx.Rows) error {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		c.delivery(d.delivery())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit deliveries: %w", err)
	}
	return c.report(), nil
}

// tableCheck compares stored rows with a fold, one row at a time: first
// every message row, then every delivery row.
type tableCheck struct {
	f *Folded
	// stored holds the ids of the stored messages.
	stored map[uuid.UUID]struct{}
	// matched holds the folded deliveries a stored row was compared with.
	matched    map[*Delivery]struct{}
	deliveries int
	violations []Violation
}

func newTableCheck(f *Folded) *tableCheck {
	return &tableCheck{f: f, stored: make(map[uuid.UUID]struct{}, len(f.Messages)),
		matched: map[*Delivery]struct{}{}}
}

// message compares one stored message row, without its deliveries.
func (c *tableCheck) message(got *Message) {
	c.stored[got.ID] = struct{}{}
	want := c.f.Messages[got.ID]
	if want == nil {
		c.violations = append(c.violations, Violation{MessageID: got.ID, Problem: "in the messages table but not in the journal"})
		return
	}
	c.violations = append(c.violations, compareMessage(got, want)...)
}

// delivery compares one stored delivery row; every message row must have
// been seen first.
func (c *tableCheck) delivery(got Delivery) {
	c.deliveries++
	if _, ok := c.stored[got.MessageID]; !ok {
		c.violations = append(c.violations, Violation{MessageID: got.MessageID, DeliveryID: got.ID, Problem: "stored delivery of no stored message"})
		return
	}
	m := c.f.Messages[got.MessageID]
	if m == nil {
		// Reported as a message in the table only.
		return
	}
	want := m.Delivery(got.ID)
	if want == nil {
		c.violations = append(c.violations, Violation{MessageID: m.ID, DeliveryID: got.ID, Problem: "in the deliveries table but not in the journal"})
		return
	}
	c.matched[want] = struct{}{}
	c.violations = append(c.violations, compareDelivery(m.ID, &got, want)...)
}

// report lists what the fold holds and the tables do not, after the rows.
func (c *tableCheck) report() *Report {
	for id, want := range c.f.Messages {
		if _, ok := c.stored[id]; !ok {
			c.violations = append(c.violations, Violation{MessageID: id, Problem: "in the journal but not in the messages table"})
			continue
		}
		for i := range want.Deliveries {
			if _, ok := c.matched[&want.Deliveries[i]]; !ok {
				c.violations = append(c.violations, Violation{MessageID: id, DeliveryID: want.Deliveries[i].ID,
					Problem: "in the journal but not in the deliveries table"})
			}
		}
	}
	slices.SortStableFunc(c.violations, compareViolations)
	return &Report{Events: c.f.Events, Messages: len(c.stored), Deliveries: c.deliveries,
		Violations: append(slices.Clip(c.f.Violations), c.violations...)}
}

// compareViolations orders the table's violations by message, delivery and
// problem, so a report reads the same every time.
func compareViolations(a, b Violation) int {
	if c := bytes.Compare(a.MessageID[:], b.MessageID[:]); c != 0 {
		return c
	}
	if c := bytes.Compare(a.DeliveryID[:], b.DeliveryID[:]); c != 0 {
		return c
	}
	return strings.Compare(a.Problem, b.Problem)
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
	out := compareMessage(stored, folded)
	byID := map[uuid.UUID]Delivery{}
	for _, d := range stored.Deliveries {
		byID[d.ID] = d
	}
	for i := range folded.Deliveries {
		want := &folded.Deliveries[i]
		got, ok := byID[want.ID]
		if !ok {
			out = append(out, Violation{MessageID: folded.ID, DeliveryID: want.ID, Problem: "in the journal but not in the deliveries table"})
			continue
		}
		delete(byID, want.ID)
		out = append(out, compareDelivery(folded.ID, &got, want)...)
	}
	for id := range byID {
		out = append(out, Violation{MessageID: folded.ID, DeliveryID: id, Problem: "in the deliveries table but not in the journal"})
	}
	return out
}

// compareMessage lists the fields but the deliveries in which stored
// differs from folded.
func compareMessage(stored, folded *Message) []Violation {
	if sameMessage(stored, folded) {
		return nil
	}
	var out []Violation
	for _, p := range diffFields(*stored, *folded, "Deliveries") {
		out = append(out, Violation{MessageID: folded.ID, Problem: p})
	}
	return out
}

func compareDelivery(message uuid.UUID, stored, folded *Delivery) []Violation {
	if sameDelivery(stored, folded) {
		return nil
	}
	var out []Violation
	for _, p := range diffFields(*stored, *folded) {
		out = append(out, Violation{MessageID: message, DeliveryID: folded.ID, Problem: p})
	}
	return out
}

// sameMessage is diffFields(a, b, "Deliveries") finding nothing, without
// reflection: the audit asks it of every row. TestSameFieldsCoverEveryField
// keeps it in step with Message.
func sameMessage(a, b *Message) bool {
	return a.ID == b.ID && a.Version == b.Version && a.Source == b.Source && a.From == b.From &&
		a.To == b.To && a.ContentType == b.ContentType && a.IdempotencyKey == b.IdempotencyKey &&
		a.PayloadSize == b.PayloadSize && a.PayloadSHA256 == b.PayloadSHA256 && a.Stage == b.Stage &&
		a.Refusal == b.Refusal && a.Status == b.Status && a.Error == b.Error &&
		a.AttemptCount == b.AttemptCount && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

// sameDelivery is diffFields(a, b) finding nothing, without reflection.
func sameDelivery(a, b *Delivery) bool {
	return a.ID == b.ID && a.MessageID == b.MessageID && a.Seq == b.Seq && a.Target == b.Target &&
		a.State == b.State && a.Attempts == b.Attempts && a.DispatchCount == b.DispatchCount &&
		a.Redeliveries == b.Redeliveries && a.NextDue.Equal(b.NextDue) && a.ClaimToken == b.ClaimToken &&
		a.LeaseEnd.Equal(b.LeaseEnd) && a.LastError == b.LastError && a.CreatedAt.Equal(b.CreatedAt) &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.FinishedAt.Equal(b.FinishedAt)
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
