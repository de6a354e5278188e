package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/retention"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
)

// TestAuditArchive: waybill audit says what retention removed, and with
// --archive verifies the archive, naming a file that was changed.
func TestAuditArchive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := dbtest.URL(t)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	base := service.Base{Now: clock.Now}
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: base, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	settings := lifecycle.DefaultSettings()
	settings.Retention = lifecycle.Retention{SettledAfter: new(lifecycle.Duration(time.Hour)), ArchiveDir: dir}
	if err := w.SetSettings(ctx, settings, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	// With no route the message is settled at once: not routed.
	if _, _, err := w.Ingest(ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	r, err := retention.New(retention.Config{Base: base, Writer: w, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.Pass(ctx); err != nil || res.Removed() != 1 {
		t.Fatalf("pass: %+v, %v", res, err)
	}
	waybill := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, append(args, "--database-url", url), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := waybill("audit", "--archive", dir)
	if code != 0 || !strings.Contains(out, "retention removed 2 events of 1 message in 1 batch (1 after settled_after, 0 after failed_after)") ||
		!strings.Contains(out, "1 file, 2 events, 1 message checked; 0 violations") {
		t.Fatalf("audit: %d %s", code, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*", "batch-00000001.jsonl.gz"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	if err := os.WriteFile(files[0], []byte("not what was archived"), 0o640); err != nil {
		t.Fatal(err)
	}
	if code, out := waybill("audit", "--archive", dir); code != 1 || !strings.Contains(out, "batch-00000001.jsonl.gz: its SHA-256 is") {
		t.Fatalf("audit of a changed file: %d %s", code, out)
	}
}
