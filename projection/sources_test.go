package projection_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// TestAuditHoldsAnInboxWatermarkToTheJournal: the audit accepts a
// watermark that the journal accounts for (rows taken, holes passed after
// max_commit_delay) and names one past them, a hole passed too early and a
// hole that holds a row taken.
func TestAuditHoldsAnInboxWatermarkToTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	config := json.RawMessage(`{"database_url": "postgres://u@h/d", "table": "inbox", "id_column": "id",
		"payload_column": "body", "from_column": "f", "to_column": "t", "processed_column": "p"}`)
	if _, err := b.w.CreateSource(b.ctx, lifecycle.Source{Name: "ciims", Kind: "inbox_table", Config: config}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	if _, held, err := sources.TakeLease(b.ctx, b.db, "ciims", "test", b.now.Add(time.Hour), b.now); err != nil || !held {
		t.Fatalf("take the lease: %v, held %v", err, held)
	}
	take := func(id int64) {
		t.Helper()
		_, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "ciims", From: "a", To: "b", Payload: []byte("x"),
			IdempotencyKey: fmt.Sprintf("row:%d", id), Row: &commands.InboxRow{Source: "ciims", ID: id}})
		if err != nil {
			t.Fatal(err)
		}
	}
	hole := func(from, to int64, missing time.Duration, watermark int64) {
		t.Helper()
		err := b.w.PassHole(b.ctx, journal.SourceHolePassed{Source: "ciims", From: from, To: to,
			MissingSince: b.now.Add(-missing), MaxCommitDelay: lifecycle.Duration(5 * time.Minute)}, watermark, "test")
		if err != nil {
			t.Fatal(err)
		}
	}
	take(1)
	take(2)
	hole(3, 4, 5*time.Minute, 0)
	take(5)
	if _, err := b.db.Exec(b.ctx, `UPDATE source_state SET watermark = 5`); err != nil {
		t.Fatal(err)
	}
	if r := b.audit(t); len(r.Violations) != 0 {
		t.Fatalf("violations: %v", r.Violations)
	}

	hole(6, 6, time.Minute, 0) // too early
	hole(5, 5, time.Hour, 0)   // holds row 5
	if _, err := b.db.Exec(b.ctx, `UPDATE source_state SET watermark = 7`); err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, v := range b.audit(t).Violations {
		problems = append(problems, v.String())
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{"ids 6 to 6 passed after 1m0s missing, before max_commit_delay 5m0s",
		"ids 5 to 5 were passed as a hole, but row 5 of them was taken",
		"the watermark is 7, but the journal accounts for the ids up to 5 only"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q not reported in:\n%s", want, got)
		}
	}
}
