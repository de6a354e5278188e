package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/securefile"
	"github.com/waybill/waybill/service"
)

// waybillCLI runs the command line and returns its exit code and outputs.
func waybillCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTokenCreate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := dbtest.URL(t)

	// On a database no server has prepared yet: the command ensures the schema.
	code, out, errOut := waybillCLI(t, "token", "create", "--name", "ci-deploy", "--role", "ingest", "--database-url", url)
	if code != 0 || !strings.Contains(errOut, "created a ingest token named ci-deploy") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	token := strings.TrimSuffix(out, "\n")
	if strings.ContainsAny(token, " \n") {
		t.Fatalf("stdout %q is not just the token", out)
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if id, err := auth.NewStore(db, nil).Authenticate(ctx, token); err != nil || id != (auth.Identity{Name: "ci-deploy", Role: auth.RoleIngest}) {
		t.Fatalf("the printed token: %+v, %v", id, err)
	}
	code, out, errOut = waybillCLI(t, "token", "create", "--name", "partner", "--role", "receipt", "--database-url", url)
	if code != 0 {
		t.Fatalf("--role receipt: exit %d: %s%s", code, out, errOut)
	}
	if id, err := auth.NewStore(db, nil).Authenticate(ctx, strings.TrimSpace(out)); err != nil || id != (auth.Identity{Name: "partner", Role: auth.RoleReceipt}) {
		t.Fatalf("the receipt token: %+v, %v", id, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", "alice"}, "--role is required: admin, ingest, reader or receipt"},
		{[]string{"alice"}, "--role is required"},
		{[]string{"--role", "admin"}, "a name (NAME or --name) is required"},
		{[]string{"--name", "Alice", "--role", "admin"}, `--name: "Alice" is not a name`},
		{[]string{"--name", "alice", "--role", "root"}, `--role: "root" is not a role: allowed are admin, ingest, reader, receipt`},
		{[]string{"--name", "alice", "--role", "admin", "extra"}, `unexpected argument "extra"`},
	} {
		code, out, errOut := waybillCLI(t, append([]string{"token", "create", "--database-url", url}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if code, _, errOut := waybillCLI(t, "token", "rotate"); code != 2 || !strings.Contains(errOut, "usage: waybill token create") {
		t.Errorf("token rotate: exit %d: %s", code, errOut)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d tokens (%v), want only the first two", n, err)
	}
}

func TestTokenListAndRevoke(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	var ids []string
	for _, c := range [][2]string{{"alice", "admin"}, {"ci-deploy", "ingest"}} {
		code, out, errOut := waybillCLI(t, "token", "create", "--name", c[0], "--role", c[1], "--database-url", url)
		if code != 0 {
			t.Fatalf("create: exit %d: %s", code, errOut)
		}
		ids = append(ids, out[3:19])
	}
	code, out, errOut := waybillCLI(t, "token", "list", "--database-url", url)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[1], ids[0]) || !strings.Contains(lines[1], "alice") || !strings.Contains(lines[1], "admin") ||
		!strings.Contains(lines[2], ids[1]) || !strings.Contains(lines[2], "ci-deploy") || strings.Contains(out, "wb_") {
		t.Fatalf("list: exit %d:\n%s%s", code, out, errOut)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{ids[1]}, 0, "revoked the ingest token " + ids[1] + " named ci-deploy"},
		{[]string{ids[1]}, 1, "no such token"},
		{[]string{ids[0]}, 1, "it is the last admin token"},
		{[]string{"XYZ"}, 2, "id: must be 16 lower-case hex digits"},
		{nil, 2, "the id of the token to revoke is required"},
	} {
		code, _, errOut := waybillCLI(t, append(append([]string{"token", "revoke"}, c.args...), "--database-url", url)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("revoke %v: exit %d, %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if _, out, _ := waybillCLI(t, "token", "list", "--database-url", url); strings.Contains(out, "ci-deploy") || !strings.Contains(out, "alice") {
		t.Fatalf("list after revoking: %s", out)
	}
}

func TestTokenCreateNoDataDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "typo")
	code, _, errOut := waybillCLI(t, "token", "create", "--name", "alice", "--role", "admin", "--database-url", "", "--data-dir", dir)
	if code != 1 || !strings.Contains(errOut, "no database in "+filepath.Join(dir, "pg")) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command made %s: %v", dir, err)
	}
}

// TestTokenCreateEmbedded creates tokens in the embedded PostgreSQL of a
// data directory with no server on it: one found running is used and left
// running; without one, the command starts its own and stops it again,
// also when a killed server left the file with its database's URL behind.
func TestTokenCreateEmbedded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// As root, the embedded server runs as the postgres user, which must
	// reach the data directory: t.TempDir's parent is not searchable.
	dir, err := os.MkdirTemp("", "waybill-token-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	pidFile := filepath.Join(dir, "pg", "postmaster.pid")
	create := func(name string) string {
		t.Helper()
		code, out, errOut := waybillCLI(t, "token", "create", "--name", name, "--role", "reader", "--database-url", "", "--data-dir", dir)
		if code != 0 {
			t.Fatalf("token create %s: exit %d: %s%s", name, code, out, errOut)
		}
		return strings.TrimSpace(out)
	}

	// A PostgreSQL this test started: the command uses it and leaves it.
	var pg service.List
	url, err := startEmbeddedPostgres(ctx, dir, nil, quiet, &pg)
	if err != nil {
		t.Fatal(err)
	}
	alice := create("alice")
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("the PostgreSQL the command found running: %v", err)
	}
	db.Close()

	// It stops, as with a killed server, whose URL file stays: the
	// command starts its own PostgreSQL, then stops it.
	if err := securefile.Write(filepath.Join(dir, databaseURLFile), []byte(url+"\n")); err != nil {
		t.Fatal(err)
	}
	pg.Stop(ctx)
	bob := create("bob")
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command left the PostgreSQL it started running: %v", err)
	}

	// The next start finds both tokens.
	url, err = startEmbeddedPostgres(ctx, dir, nil, quiet, &pg)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop(context.Background())
	db, err = pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, token := range map[string]string{"alice": alice, "bob": bob} {
		if id, err := auth.NewStore(db, nil).Authenticate(ctx, token); err != nil || id != (auth.Identity{Name: name, Role: auth.RoleReader}) {
			t.Errorf("%s's token after a restart: %+v, %v", name, id, err)
		}
	}
}

// TestTokenCreateScopedAndExpiring: `token create NAME` takes a scope and a
// lifetime, refuses a scope the role does not take naming the flag, and
// `token list` shows scope, expiry and last use.
func TestTokenCreateScopedAndExpiring(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := dbtest.URL(t)
	code, out, errOut := waybillCLI(t, "token", "create", "erp-feed", "--role", "ingest", "--sources", "erp,crm", "--expires", "90d",
		"--database-url", url)
	if code != 0 || !strings.Contains(errOut, "sources erp,crm") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, err := auth.NewStore(db, nil).Authenticate(ctx, strings.TrimSpace(out))
	if err != nil || id.Name != "erp-feed" || id.Scope == nil || strings.Join(id.Scope.Sources, ",") != "erp,crm" {
		t.Fatalf("the printed token: %+v, %v", id, err)
	}
	if code, out, errOut := waybillCLI(t, "token", "create", "--name", "partner", "--role", "receipt", "--targets", "billing",
		"--database-url", url); code != 0 {
		t.Fatalf("--name and --targets: exit %d: %s%s", code, out, errOut)
	}
	code, out, _ = waybillCLI(t, "token", "list", "--database-url", url)
	if code != 0 || !strings.Contains(out, "SCOPE") || !strings.Contains(out, "EXPIRES") || !strings.Contains(out, "LAST USED") {
		t.Fatalf("list: %s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "erp-feed") && (!strings.Contains(line, "sources erp,crm") || !strings.Contains(line, "-03-") ||
			strings.Contains(line, "never never")):
			t.Errorf("erp-feed's line: %q", line)
		case strings.Contains(line, "partner") && (!strings.Contains(line, "targets billing") || !strings.Contains(line, "never")):
			t.Errorf("partner's line: %q", line)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"root", "--role", "admin", "--sources", "erp"}, "--sources: a token of role admin takes no sources"},
		{[]string{"root", "--role", "receipt", "--sources", "erp"}, "--sources: a token of role receipt takes no sources"},
		{[]string{"feed", "--role", "ingest", "--targets", "billing"}, "--targets: a token of role ingest takes no targets"},
		{[]string{"feed", "--role", "ingest", "--sources", "erp,,crm"}, "--sources: "},
		{[]string{"feed", "--role", "ingest", "--sources", ""}, "--sources: must name at least one"},
		{[]string{"feed", "--role", "receipt", "--targets="}, "--targets: must name at least one"},
		{[]string{"feed", "--role", "ingest", "--expires", "soon"}, `--expires: "soon" is not a lifetime`},
		{[]string{"feed", "--name", "other", "--role", "ingest"}, "the name is given twice"},
		{[]string{"feed", "--role", "ingest", "extra"}, `unexpected argument "extra"`},
	} {
		code, out, errOut := waybillCLI(t, append([]string{"token", "create"}, append(c.args, "--database-url", url)...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if code, _, errOut := waybillCLI(t, "token", "help"); code != 0 || !strings.Contains(errOut, "--sources erp,crm") ||
		!strings.Contains(errOut, "--expires 90d") || !strings.Contains(errOut, "create NAME") {
		t.Errorf("token help: %s", errOut)
	}
}
