package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "waybill-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binaryDir = dir
	code := dbtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestAuditRebuildReset(t *testing.T) {
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
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), DB: db})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateTarget(ctx, lifecycle.Target{Name: "alpha", Kind: "http", Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateRoute(ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "alpha"}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	m, _, err := w.Ingest(ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	key, err := w.TargetKeys(ctx, "alpha")
	if err != nil || len(key) != 1 {
		t.Fatalf("keys %+v: %v", key, err)
	}
	waybill := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(ctx, append(args, "--database-url", url), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := waybill("audit"); code != 0 || !strings.Contains(out, "5 events, 1 message, 1 delivery, 0 operations checked; 0 violations") {
		t.Fatalf("clean audit: %d %s", code, out)
	}
	if _, err := db.Exec(ctx, `UPDATE messages SET status = 'delivered'`); err != nil {
		t.Fatal(err)
	}
	if code, out := waybill("audit", "--message", m.ID.String()); code != 1 || !strings.Contains(out, "Status is delivered in the table, in_progress by the journal") {
		t.Fatalf("audit of a corrupt row: %d %s", code, out)
	}
	if code, out := waybill("reset"); code != 2 || !strings.Contains(out, "--projections") {
		t.Fatalf("reset without --projections: %d %s", code, out)
	}
	for _, args := range [][]string{{"rebuild", "--share", "0.5"}, {"rebuild", "--online", "--share", "0"}, {"rebuild", "--online", "--share", "1.5"}} {
		if code, out := waybill(args...); code != 2 || !strings.Contains(out, "--share") {
			t.Fatalf("%v: %d %s", args, code, out)
		}
	}
	if code, out := waybill("audit", "--message", m.ID.String()); code != 1 {
		t.Fatalf("audit after the refused rebuilds: %d %s", code, out)
	}
	if code, out := waybill("rebuild", "--online", "--share", "1"); code != 0 || !strings.Contains(out, "0 violations") {
		t.Fatalf("online rebuild at full speed: %d %s", code, out)
	}
	if code, out := waybill("rebuild"); code != 0 || !strings.Contains(out, "0 violations") {
		t.Fatalf("rebuild: %d %s", code, out)
	}
	if code, out := waybill("reset", "--projections"); code != 0 {
		t.Fatalf("reset: %d %s", code, out)
	}
	// Nothing but a rebuild makes the tables again: not an audit, nor a
	// server's start, which would serve them empty.
	if code, out := waybill("audit"); code != 1 || !strings.Contains(out, "the projections were reset and not rebuilt") {
		t.Fatalf("audit after reset: %d %s", code, out)
	}
	if code, out := waybill("rebuild"); code != 0 || !strings.Contains(out, "1 message,") {
		t.Fatalf("rebuild after reset: %d %s", code, out)
	}
	// The signing keys are no projection: the reset and the rebuild keep them.
	if keys, err := w.TargetKeys(ctx, "alpha"); err != nil || len(keys) != 1 || keys[0].ID != key[0].ID || keys[0].SecretText() != key[0].SecretText() {
		t.Fatalf("the keys after a reset and a rebuild: %+v, %v; were %+v", keys, err, key)
	}
}

// TestServeFlagsDocumented: every flag of serve has its row in the table of
// docs/operations.md, with its variable and its default.
func TestServeFlagsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serveFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		row := fmt.Sprintf("| `--%s` | `%s` | ", f.Name, envName(f.Name))
		if f.DefValue != "" {
			row += "`" + f.DefValue + "`"
		}
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/operations.md has no row starting %q", row)
		}
	})
}

// TestHelpNamesEveryCommandAndFlag: `waybill help` names every command and
// every flag each takes, as its own --help lists them. serve's flags are
// in `waybill serve --help` and docs/operations.md (TestServeFlagsDocumented).
func TestHelpNamesEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	_, help, _ := waybillCLI(t, "help")
	flagLine := regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)
	for _, cmd := range [][]string{{"serve"}, {"audit"}, {"rebuild"}, {"reset"}, {"token", "create"}, {"token", "list"},
		{"token", "revoke"}, {"bench"}, {"messages"}, {"messages", "show"}, {"redeliver"}, {"redispatch"}, {"deliver-now"},
		{"operations", "create"}, {"operations", "list"}, {"operations", "show"}, {"operations", "cancel"}} {
		name := strings.Join(cmd, " ")
		if !regexp.MustCompile(`(?m)^  ` + strings.Join(cmd, ` +`) + `\b`).MatchString(help) {
			t.Errorf("waybill help does not list %s", name)
		}
		if name == "serve" {
			continue
		}
		_, _, own := waybillCLI(t, append(cmd, "--help")...)
		flags := flagLine.FindAllStringSubmatch(own, -1)
		if len(flags) == 0 {
			t.Errorf("waybill %s --help lists no flags:\n%s", name, own)
		}
		for _, f := range flags {
			if !strings.Contains(help, "--"+f[1]) {
				t.Errorf("waybill help does not name --%s of %s", f[1], name)
			}
		}
	}
}

// TestVersion: waybill version prints the build and takes no arguments.
func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := waybillCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "waybill ") || !strings.HasSuffix(out, ", "+runtime.Version()+"\n") {
		t.Errorf("exit %d: %q", code, out)
	}
	if code, _, errOut := waybillCLI(t, "version", "now"); code != 2 || !strings.Contains(errOut, "takes no arguments") {
		t.Errorf("with an argument: exit %d: %q", code, errOut)
	}
}
