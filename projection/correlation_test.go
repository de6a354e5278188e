package projection_test

import (
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestAuditHoldsCorrelationsToTheJournal: the correlations a hand-over and
// a receipt by id make are as the journal makes them; the audit names a
// receipt by an id that is not its delivery's open correlation, and a row
// that differs from the journal's.
func TestAuditHoldsCorrelationsToTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Deliveries[0]
	c, err := b.w.Claim(b.ctx, d.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	handed := lifecycle.AwaitingAck("202 Accepted", b.now.Add(time.Hour))
	handed.ExternalID = "SM-1"
	if _, err := b.w.Complete(b.ctx, d.ID, c.Token, handed); err != nil {
		t.Fatal(err)
	}
	got, err := projection.LoadCorrelation(b.ctx, b.db, projection.CorrelationKey{Target: d.Target, ExternalID: "SM-1"})
	if err != nil || got != (projection.Correlation{DeliveryID: d.ID, MessageID: m.ID}) {
		t.Fatalf("correlation %+v %v", got, err)
	}
	if r := b.audit(t); len(r.Violations) != 0 {
		t.Fatalf("violations %v", r.Violations)
	}

	// An intermediate receipt by an id nobody gave, written behind the
	// commands' back; and a correlation consumed in the table only.
	m, err = projection.Load(b.ctx, b.db, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO journal (recorded_at, stream, version, delivery_id, target, kind, actor, old_state, new_state, payload)
		VALUES ($1, $2, $3, $4, $5, 'delivery.receipt_intermediate', 'operator:gateway', 'awaiting_ack', 'awaiting_ack',
		'{"external_id":"SM-2"}')`, b.now, m.ID.String(), m.Version+1, d.ID, d.Target); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `UPDATE messages SET version = $2 WHERE id = $1`, m.ID, m.Version+1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `UPDATE correlations SET consumed = true`); err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, v := range b.audit(t).Violations {
		problems = append(problems, v.String())
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{`a receipt by id "SM-2" of alpha, which is not the delivery's open correlation`,
		`correlation "SM-1" of alpha is {DeliveryID:` + d.ID.String()} {
		if !strings.Contains(all, want) {
			t.Errorf("%q not reported in:\n%s", want, all)
		}
	}
	if len(problems) != 2 {
		t.Errorf("violations:\n%s", all)
	}
}
