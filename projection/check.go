package projection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
)

// checkTables compares the stored rows (of one message, unless message is
// uuid.Nil) with the fold f and reports with f's own violations. The whole
// tables are read in shares by message id, one share on each of qs at once
// (which must share one snapshot); each reads its messages, then their
// deliveries, and compares every row as it comes, so no copy of the tables
// is kept.
func checkTables(ctx context.Context, qs []journal.Querier, f *Folded, message uuid.UUID) (*Report, error) {
	var shares []share
	if message != uuid.Nil {
		// The fold holds this message alone.
		shares = []share{{lo: 0, hi: 256, messages: " WHERE m.id = $1", deliveries: " WHERE d.message_id = $1", args: []any{message}}}
	} else {
		shares = shareIDs(len(qs))
	}
	checks := make([]*tableCheck, len(shares))
	errs := make([]error, len(shares))
	var wg sync.WaitGroup
	for i, sh := range shares {
		checks[i] = &tableCheck{f: f, stored: make(map[uuid.UUID]struct{}, len(f.Messages)/len(shares)+1),
			matched: map[*Delivery]struct{}{}, callbacks: map[uuid.UUID]struct{}{}}
		wg.Go(func() { errs[i] = checks[i].read(ctx, qs[i], sh) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r := report(f, checks, shares)
	shaped, err := checkShapes(ctx, qs[0], f, message)
	if err != nil {
		return nil, err
	}
	r.Violations = append(r.Violations, shaped...)
	if message == uuid.Nil {
		counted, err := checkCounts(ctx, qs[0], f)
		if err != nil {
			return nil, err
		}
		r.Violations = append(r.Violations, counted...)
		laned, err := checkLanes(ctx, qs[0], f)
		if err != nil {
			return nil, err
		}
		inboxes, err := checkSources(ctx, qs[0], f)
		if err != nil {
			return nil, err
		}
		correlations, err := checkCorrelations(ctx, qs[0], f)
		if err != nil {
			return nil, err
		}
		n, operated, err := checkOperations(ctx, qs[0], f)
		if err != nil {
			return nil, err
		}
		keyed, err := checkKeys(ctx, qs[0], f)
		if err != nil {
			return nil, err
		}
		r.Operations = n
		r.Violations = append(append(append(append(append(r.Violations, laned...), inboxes...), correlations...), operated...), keyed...)
	}
	return r, nil
}

// share is the part of the tables one connection checks: the messages
// whose id's last byte is in [lo, hi), and their deliveries. The last byte
// is random in the ids Waybill makes; the first bytes of a version 7 id
// are its time, the same for every message of decades.
type share struct {
	lo, hi               int
	messages, deliveries string // the WHERE clauses
	args                 []any
}

// shareIDs cuts the ids into n shares by their last byte.
func shareIDs(n int) []share {
	out := make([]share, n)
	for i := range out {
		sh := share{lo: i * 256 / n, hi: (i + 1) * 256 / n}
		sh.messages, sh.deliveries = ` WHERE `+lastByte("m.id")+` >= $1`, ` WHERE `+lastByte("d.message_id")+` >= $1`
		sh.args = []any{sh.lo}
		if sh.hi < 256 {
			sh.messages += ` AND ` + lastByte("m.id") + ` < $2`
			sh.deliveries += ` AND ` + lastByte("d.message_id") + ` < $2`
			sh.args = append(sh.args, sh.hi)
		}
		out[i] = sh
	}
	return out
}

// lastByte is the SQL of the last byte of the uuid column.
func lastByte(column string) string { return `get_byte(uuid_send(` + column + `), 15)` }

func (sh share) holds(id uuid.UUID) bool { return int(id[15]) >= sh.lo && int(id[15]) < sh.hi }

// tableCheck compares the stored rows of one share with the fold, one row
// at a time: first every message row, then every delivery row.
type tableCheck struct {
	f *Folded
	// stored holds the ids of the stored messages.
	stored map[uuid.UUID]struct{}
	// matched holds the folded deliveries a stored row was compared with,
	// callbacks the messages whose stored callback was.
	matched    map[*Delivery]struct{}
	callbacks  map[uuid.UUID]struct{}
	deliveries int
	violations []Violation
}

func (c *tableCheck) read(ctx context.Context, q journal.Querier, sh share) error {
	var m Message
	dest := m.scanDest()
	err := scanRows(ctx, q, `SELECT `+messageColumns+` FROM messages m`+sh.messages, sh.args, func(rows pgx.Rows) error {
		m = Message{}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		m.normalize()
		c.message(&m)
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit messages: %w", err)
	}
	var d deliveryRow
	dest = d.scanDest()
	err = scanRows(ctx, q, `SELECT `+deliveryColumns+` FROM deliveries d`+sh.deliveries, sh.args, func(rows pgx.Rows) error {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		c.delivery(d.delivery())
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit deliveries: %w", err)
	}
	if err := c.readCallbacks(ctx, q, sh); err != nil {
		return fmt.Errorf("audit callbacks: %w", err)
	}
	return nil
}

// message compares one stored message row, without its deliveries.
func (c *tableCheck) message(got *Message) {
	c.stored[got.ID] = struct{}{}
	want := c.f.Messages[got.ID]
	if want == nil {
		c.violations = append(c.violations, Violation{MessageID: got.ID, Problem: "in the messages table but not in the journal"})
		return
	}
	// The row read alone gives no stream version, last move or attempts:
	// they follow from its deliveries' rows (derive), each compared below.
	got.Version, got.UpdatedAt, got.AttemptCount = want.Version, want.UpdatedAt, want.AttemptCount
	c.violations = append(c.violations, compareMessage(got, want)...)
}

// delivery compares one stored delivery row; every message row of the
// share must have been seen first.
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

// report adds what the fold holds and the tables do not to what the shares
// found.
func report(f *Folded, checks []*tableCheck, shares []share) *Report {
	r := &Report{Events: f.Events, Removed: f.Removed}
	var found []Violation
	for _, c := range checks {
		r.Messages += len(c.stored)
		r.Deliveries += c.deliveries
		found = append(found, c.violations...)
	}
	for id, want := range f.Messages {
		var c *tableCheck
		for i, sh := range shares {
			if sh.holds(id) {
				c = checks[i]
				break
			}
		}
		if _, ok := c.stored[id]; !ok {
			found = append(found, Violation{MessageID: id, Problem: "in the journal but not in the messages table"})
			continue
		}
		if _, ok := c.callbacks[id]; want.Callback != nil && !ok {
			found = append(found, Violation{MessageID: id, Problem: "callback in the journal but not in the callbacks table"})
		}
		for i := range want.Deliveries {
			if _, ok := c.matched[&want.Deliveries[i]]; !ok {
				found = append(found, Violation{MessageID: id, DeliveryID: want.Deliveries[i].ID,
					Problem: "in the journal but not in the deliveries table"})
			}
		}
	}
	slices.SortStableFunc(found, compareViolations)
	r.Violations = append(slices.Clip(f.Violations), found...)
	return r
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
