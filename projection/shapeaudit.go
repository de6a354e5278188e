package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
)

// foldedShape is the shape the journal records of one delivery, which
// delivery_shapes holds beside it until retention expunges its message's
// payload.
type foldedShape struct {
	message uuid.UUID
	shape   *journal.Shape
}

// noteShapes keeps the shapes of the deliveries a dispatch, redispatch or
// resend of message made.
func (f *Folded) noteShapes(message uuid.UUID, p journal.Payload) {
	var nds journal.NewDeliveries
	switch p := p.(type) {
	case *journal.MessageDispatched:
		nds = p.NewDeliveries
	case *journal.MessageRedispatched:
		nds = p.NewDeliveries
	case *journal.MessageResent:
		nds = p.NewDeliveries
	default:
		return
	}
	for _, d := range nds.Deliveries {
		if d.Shape == nil {
			continue
		}
		if f.shapes == nil {
			f.shapes = map[uuid.UUID]foldedShape{}
		}
		f.shapes[d.ID] = foldedShape{message: message, shape: d.Shape}
	}
}

// shapesSQL reads every stored shape with the size and digest of its
// payload, which the journal records.
const shapesSQL = `SELECT delivery_id, message_id, shape, octet_length(body), encode(sha256(body), 'hex') FROM delivery_shapes`

// checkShapes holds delivery_shapes (of one message, unless message is
// uuid.Nil) to the journal: a row for each delivery whose shape the
// journal records, equal to it, with a payload of the size and SHA-256
// recorded, unless retention expunged the message's payload, which
// deletes them; and no other row. Nothing else checks these rows: they
// are not the fold's, and a rebuild keeps them as they are.
func checkShapes(ctx context.Context, q journal.Querier, f *Folded, message uuid.UUID) ([]Violation, error) {
	sql, args := shapesSQL, []any(nil)
	if message != uuid.Nil {
		sql, args = sql+` WHERE message_id = $1`, []any{message}
	}
	var out []Violation
	seen := map[uuid.UUID]bool{}
	var (
		id, stored uuid.UUID
		got        journal.Shape
		size       *int64
		sum        *string
	)
	err := scanRows(ctx, q, sql, args, func(rows pgx.Rows) error {
		got = journal.Shape{}
		if err := rows.Scan(&id, &stored, &got, &size, &sum); err != nil {
			return err
		}
		seen[id] = true
		if problem := f.shapeProblem(id, stored, &got, size, sum); problem != "" {
			v := Violation{MessageID: stored, DeliveryID: id, Problem: problem}
			if want, ok := f.shapes[id]; ok {
				v.MessageID = want.message
			}
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit delivery shapes: %w", err)
	}
	for id, want := range f.shapes {
		if m := f.Messages[want.message]; !seen[id] && m != nil && !m.PayloadExpunged {
			out = append(out, Violation{MessageID: want.message, DeliveryID: id,
				Problem: "the journal records the delivery's shape (" + shapeJSON(want.shape) + "), but delivery_shapes holds none"})
		}
	}
	slices.SortStableFunc(out, compareViolations)
	return out, nil
}

// shapeProblem is what is wrong with the stored shape got of delivery id
// under message stored, whose payload has size bytes and the digest sum
// (nil for none); "" when it is what the journal recorded.
func (f *Folded) shapeProblem(id, stored uuid.UUID, got *journal.Shape, size *int64, sum *string) string {
	want, ok := f.shapes[id]
	m := f.Messages[want.message]
	switch {
	case !ok && f.Messages[stored] != nil && f.Messages[stored].Delivery(id) != nil:
		return "delivery_shapes holds a shape (" + shapeJSON(got) + ") of a delivery the journal records as sent as it is"
	case !ok:
		return "delivery_shapes holds a shape of no delivery in the journal"
	case want.message != stored:
		return fmt.Sprintf("delivery_shapes holds the shape under message %s", stored)
	case m != nil && m.PayloadExpunged:
		return "delivery_shapes still holds the shape, but retention expunged the message's payload"
	case shapeJSON(got) != shapeJSON(want.shape):
		return "the shape is " + shapeJSON(got) + " in delivery_shapes, " + shapeJSON(want.shape) + " by the journal"
	case want.shape.Shaped() && (size == nil || *size != want.shape.PayloadSize || *sum != want.shape.PayloadSHA256):
		if size == nil {
			return fmt.Sprintf("delivery_shapes holds no payload; the journal recorded one of %d bytes, SHA-256 %s",
				want.shape.PayloadSize, want.shape.PayloadSHA256)
		}
		return fmt.Sprintf("the shaped payload is %d bytes, SHA-256 %s in delivery_shapes; the journal recorded %d bytes, SHA-256 %s",
			*size, *sum, want.shape.PayloadSize, want.shape.PayloadSHA256)
	case !want.shape.Shaped() && size != nil:
		return fmt.Sprintf("delivery_shapes holds a payload of %d bytes, but the journal records the message's as sent", *size)
	}
	return ""
}

// shapeJSON is a shape as the journal writes it, to compare and show.
func shapeJSON(s *journal.Shape) string {
	b, _ := json.Marshal(s) // a struct of strings and a map of strings
	return string(b)
}
