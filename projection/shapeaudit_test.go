package projection_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestAuditHoldsShapesToTheJournal: the audit finds delivery_shapes as the
// journal records the transforms' shapes, and reports, naming the
// delivery, a row changed, missing, of a delivery sent as it is, of no
// delivery, or kept after retention expunged its message's payload. A
// rebuild, offline or online, keeps the shapes, those made while the
// online one runs among them.
func TestAuditHoldsShapesToTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config:    json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Transform: `'x-test' in message.headers ? {'cancel': 'test traffic'} : {'payload': {'ref': message.payload.id}, 'path': '/in'}`},
		"operator:admin"); err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{"erp", "shop"} {
		if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: source, From: "*", To: "*", Target: "billing"}, "operator:admin"); err != nil {
			t.Fatal(err)
		}
	}
	ingest := func(source string, headers map[string]string) *projection.Message {
		t.Helper()
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: source, From: "acme", To: "globex", ContentType: "application/json",
			Payload: []byte(`{"id": "in-1"}`), Headers: headers})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	of := func(m *projection.Message, target string) uuid.UUID {
		for _, d := range m.Deliveries {
			if d.Target == target {
				return d.ID
			}
		}
		t.Fatalf("message %s has no delivery to %s", m.ID, target)
		return uuid.Nil
	}
	shaped := ingest("erp", nil)
	cancelled := ingest("shop", map[string]string{"x-test": "1"})
	if cancelled.Status != lifecycle.StatusSkipped {
		t.Fatalf("cancelled message: %s", cancelled.Status)
	}
	shapedID, plainID, cancelledID := of(shaped, "billing"), of(shaped, "alpha"), of(cancelled, "billing")
	count := func(message uuid.UUID) (n int) {
		t.Helper()
		if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM delivery_shapes WHERE message_id = $1`, message).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.db.Exec(b.ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// audit runs the whole audit and one of message, which must find the
	// same: nothing when want is "", else one violation of the delivery
	// whose problem holds want.
	audit := func(name string, message, delivery uuid.UUID, want string) {
		t.Helper()
		for _, of := range []uuid.UUID{uuid.Nil, message} {
			r, err := projection.Audit(b.ctx, b.db, of)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case want == "" && len(r.Violations) > 0:
				t.Errorf("%s: audit of %s: %v", name, of, r.Violations)
			case want != "" && (len(r.Violations) != 1 || r.Violations[0].MessageID != message ||
				r.Violations[0].DeliveryID != delivery || !strings.Contains(r.Violations[0].Problem, want)):
				t.Errorf("%s: audit of %s: %v, want one of delivery %s: %q", name, of, r.Violations, delivery, want)
			}
		}
	}
	audit("clean", shaped.ID, uuid.Nil, "")
	if count(shaped.ID) != 1 || count(cancelled.ID) != 1 {
		t.Fatalf("shapes kept: %d and %d, want 1 and 1", count(shaped.ID), count(cancelled.ID))
	}

	for _, c := range []struct {
		name, tamper, restore, want string
		message, delivery           uuid.UUID
	}{
		{"payload changed", `UPDATE delivery_shapes SET body = '\x7b7d' WHERE delivery_id = $1`,
			`UPDATE delivery_shapes SET body = convert_to('{"ref":"in-1"}', 'UTF8') WHERE delivery_id = $1`,
			"the shaped payload is 2 bytes", shaped.ID, shapedID},
		{"payload gone", `UPDATE delivery_shapes SET body = NULL WHERE delivery_id = $1`,
			`UPDATE delivery_shapes SET body = convert_to('{"ref":"in-1"}', 'UTF8') WHERE delivery_id = $1`,
			"delivery_shapes holds no payload; the journal recorded one of 14 bytes", shaped.ID, shapedID},
		{"shape changed", `UPDATE delivery_shapes SET shape = shape || '{"path": "/elsewhere"}' WHERE delivery_id = $1`,
			`UPDATE delivery_shapes SET shape = shape || '{"path": "/in"}' WHERE delivery_id = $1`,
			`"path":"/elsewhere"`, shaped.ID, shapedID},
		{"cancel changed", `UPDATE delivery_shapes SET shape = '{"cancel": "other"}' WHERE delivery_id = $1`,
			`UPDATE delivery_shapes SET shape = '{"cancel": "test traffic"}' WHERE delivery_id = $1`,
			`{"cancel":"other"} in delivery_shapes, {"cancel":"test traffic"} by the journal`, cancelled.ID, cancelledID},
		{"row gone", `DELETE FROM delivery_shapes WHERE delivery_id = $1`,
			`INSERT INTO delivery_shapes SELECT $1, message_id, shape, body FROM delivery_shapes WHERE delivery_id = '` + shapedID.String() + `'`,
			"but delivery_shapes holds none", cancelled.ID, cancelledID},
		{"a delivery sent as it is", `INSERT INTO delivery_shapes SELECT $1, message_id, shape, body FROM delivery_shapes WHERE delivery_id = '` + shapedID.String() + `'`,
			`DELETE FROM delivery_shapes WHERE delivery_id = $1`, "of a delivery the journal records as sent as it is", shaped.ID, plainID},
	} {
		arg := c.delivery
		if c.name == "row gone" {
			// Restored from the shaped row, then made the cancel again.
			exec(c.tamper, arg)
			audit(c.name, c.message, c.delivery, c.want)
			exec(`INSERT INTO delivery_shapes VALUES ($1, $2, '{"cancel": "test traffic"}', NULL)`, cancelledID, cancelled.ID)
			audit(c.name+", restored", c.message, uuid.Nil, "")
			continue
		}
		exec(c.tamper, arg)
		audit(c.name, c.message, c.delivery, c.want)
		exec(c.restore, arg)
		audit(c.name+", restored", c.message, uuid.Nil, "")
	}
	stray := uuid.Must(uuid.NewV7())
	exec(`INSERT INTO delivery_shapes VALUES ($1, $2, '{"cancel": "x"}', NULL)`, stray, shaped.ID)
	audit("a shape of no delivery", shaped.ID, stray, "a shape of no delivery in the journal")
	exec(`DELETE FROM delivery_shapes WHERE delivery_id = $1`, stray)

	// Retention's expunge deletes the shapes with the payload; one left
	// behind is reported.
	settings := lifecycle.DefaultSettings()
	settings.Retention.PayloadAfter = new(lifecycle.Duration(time.Second))
	if err := b.w.SetSettings(b.ctx, settings, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	b.now = b.now.Add(time.Second)
	if done, err := b.w.ExpungePayload(b.ctx, cancelled.ID); err != nil || !done {
		t.Fatalf("expunge: %v %v", done, err)
	}
	if n := count(cancelled.ID); n != 0 {
		t.Fatalf("%d shapes left after the expunge", n)
	}
	audit("expunged", cancelled.ID, uuid.Nil, "")
	exec(`INSERT INTO delivery_shapes VALUES ($1, $2, '{"cancel": "test traffic"}', NULL)`, cancelledID, cancelled.ID)
	audit("kept after the expunge", cancelled.ID, cancelledID, "retention expunged the message's payload")
	exec(`DELETE FROM delivery_shapes WHERE delivery_id = $1`, cancelledID)

	// A rebuild keeps the shapes: they are the journal group's.
	if r, err := projection.Rebuild(b.ctx, b.db); err != nil || len(r.Violations) > 0 {
		t.Fatalf("rebuild: %v %v", err, r)
	}
	var during *projection.Message
	r, err := projection.OnlineRebuild(b.ctx, b.db, projection.OnlineOptions{Pause: func(p projection.OnlinePhase) {
		if p == projection.PhaseCatchUp && during == nil {
			during = ingest("erp", nil)
		}
	}})
	if err != nil || len(r.Violations) > 0 {
		t.Fatalf("online rebuild: %v %v", err, r)
	}
	if during == nil || count(during.ID) != 1 || count(shaped.ID) != 1 {
		t.Fatalf("shapes after the rebuilds: %v", during)
	}
	dbtest.Audit(t, b.db)
}
