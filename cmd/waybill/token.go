package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/internal/dirlock"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
)

const tokenUsage = `usage: waybill token create NAME --role R [--sources S,… | --targets T,…] [--expires D] [--database-url URL | --data-dir DIR]
       waybill token list [--database-url URL | --data-dir DIR]
       waybill token revoke ID [--database-url URL | --data-dir DIR]

create makes an API token named NAME (or --name) and prints it on standard
output; it cannot be shown again. Roles: admin (everything), ingest (post
messages), reader (read), receipt (post receipts: for a receiver that
confirms its deliveries).

Scopes bound a token further. --sources erp,crm makes an ingest token post
only to those sources, or a reader token read only their messages (another
source's message is not found, and every other read is refused); --targets
billing makes a receipt token settle only that target's deliveries. An
admin token takes no scope; any other pairing is refused. A scoped token
cannot sign in to the console. --expires 90d (days, or a Go duration such
as 12h) makes the token stop working that long after now.

list shows every token's id, name, role, scope, creation, expiry and last
use (recorded once a minute at most), never a secret. revoke deletes the
token with the id list shows (or the whole token); running servers refuse
it within 30 s. The last admin token is not revoked: create another first.
Admins manage tokens over REST too (/api/v1/tokens) and in the console.

With no database URL they work on the database of the server running on
the data directory (found through <data dir>/database.url), or, when none
runs, start the data directory's embedded PostgreSQL for the time they run.
`

// runToken runs `waybill token create|list|revoke`, which work on the
// database directly: they need no running server.
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	if sub != "create" && sub != "list" && sub != "revoke" {
		fmt.Fprint(stderr, tokenUsage)
		if sub == "help" || sub == "-h" || sub == "--help" {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("waybill token "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tokenUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	var name, role, sourcesFlag, targetsFlag, expires *string
	if sub == "create" {
		name = fs.String("name", "", "the token's name, the subject the journal records its actions under (or as the first argument)")
		role = fs.String("role", "", "admin, ingest, reader or receipt (required)")
		sourcesFlag = fs.String("sources", "", "comma-separated sources an ingest or reader token is bound to (default: all)")
		targetsFlag = fs.String("targets", "", "comma-separated targets a receipt token is bound to (default: all)")
		expires = fs.String("expires", "", "the token's lifetime: days (90d) or a Go duration (12h) (default: none)")
	}
	dbURL := new(string)
	stringFromEnv(fs, dbURL, "database-url", "WAYBILL_DATABASE_URL", "PostgreSQL `URL` of the server's database (env WAYBILL_DATABASE_URL)")
	dataDir := fs.String("data-dir", env("WAYBILL_DATA_DIR", "./var"),
		"data directory of the embedded PostgreSQL, used when no URL is given: that of the server running on it, else started for the command (env WAYBILL_DATA_DIR)")
	rest := args[1:]
	// The one argument, the id to revoke or the name to create, may come
	// before the flags or after them.
	var id string
	if sub != "list" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	misuse := func(msg string) int {
		fmt.Fprintf(stderr, "waybill token %s: %s\n", sub, msg)
		return 2
	}
	extra := fs.Args()
	if len(extra) > 0 && id == "" && (sub == "revoke" || sub == "create" && *name == "") {
		id, extra = extra[0], extra[1:]
	}
	if len(extra) > 0 {
		return misuse(fmt.Sprintf("unexpected argument %q", extra[0]))
	}
	// Input is checked before any database is opened, or started.
	var spec auth.Spec
	switch sub {
	case "create":
		if id != "" && *name != "" && id != *name {
			return misuse(fmt.Sprintf("the name is given twice, %q and --name %q", id, *name))
		}
		if *name == "" {
			*name = id
		}
		switch {
		case *name == "" && *role == "":
			return misuse("a name (NAME or --name) and --role are required")
		case *name == "":
			return misuse("a name (NAME or --name) is required")
		case *role == "":
			return misuse("--role is required: admin, ingest, reader or receipt")
		}
		if err := lifecycle.CheckName("--name", *name); err != nil {
			return misuse(err.Error())
		}
		// A flag given, even empty ("--sources $UNSET"), asks for a scope.
		given := func(flagName string, v *string) *string {
			set := false
			fs.Visit(func(f *flag.Flag) { set = set || f.Name == flagName })
			if !set {
				return nil
			}
			return v
		}
		var err error
		if spec, err = tokenSpec(*name, *role, given("sources", sourcesFlag), given("targets", targetsFlag), *expires); err != nil {
			return misuse(err.Error())
		}
	case "revoke":
		if id == "" {
			return misuse("the id of the token to revoke is required (`waybill token list` shows them)")
		}
		var err error
		if id, err = auth.TokenID(id); err != nil {
			return misuse(err.Error())
		}
	}

	db, done, err := openCommandDB(ctx, *dbURL, *dataDir, "token "+sub, stderr)
	if err == nil {
		defer done()
		err = schema.Ensure(ctx, db)
	}
	if err != nil {
		fmt.Fprintf(stderr, "waybill token %s: %v\n", sub, err)
		return 1
	}
	store := auth.NewStore(db, nil)
	switch sub {
	case "create":
		token, made, err := store.New(ctx, spec)
		if err != nil {
			fmt.Fprintf(stderr, "waybill token create: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, token)
		fmt.Fprintf(stderr, "created a %s token named %s (%s, expires %s); keep it: it is not stored and cannot be shown again\n",
			made.Role, made.Name, tokenScope(made), tokenExpiry(made))
	case "list":
		tokens, err := store.List(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "waybill token list: %v\n", err)
			return 1
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tSCOPE\tCREATED\tEXPIRES\tLAST USED")
		for _, t := range tokens {
			used := "never"
			if t.LastUsedAt != nil {
				used = t.LastUsedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, tokenScope(t),
				t.CreatedAt.UTC().Format(time.RFC3339), tokenExpiry(t), used)
		}
		tw.Flush()
	case "revoke":
		t, err := store.Revoke(ctx, id)
		if err != nil {
			fmt.Fprintf(stderr, "waybill token revoke: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "revoked the %s token %s named %s; running servers refuse it within %s\n", t.Role, t.ID, t.Name, auth.CacheTTL)
	}
	return 0
}

// tokenSpec is the token the flags of `token create` ask for; sources and
// targets are nil when their flag is not given. A problem names its flag.
func tokenSpec(name, role string, sources, targets *string, expires string) (auth.Spec, error) {
	r, err := auth.ParseRole(role)
	if err != nil {
		return auth.Spec{}, fmt.Errorf("--role: %w", err)
	}
	spec := auth.Spec{Name: name, Role: r}
	names := func(v *string) []string {
		if v == nil {
			return nil
		}
		// Given but empty names none, which the scope's check refuses.
		return append([]string{}, auth.SplitNames(*v)...)
	}
	if sources != nil || targets != nil {
		spec.Scope = &auth.Scope{Sources: names(sources), Targets: names(targets)}
	}
	if err := auth.CheckScope(r, spec.Scope); err != nil {
		var fe *lifecycle.FieldError
		if errors.As(err, &fe) {
			return auth.Spec{}, fmt.Errorf("--%s: %s", strings.SplitN(fe.Field, "[", 2)[0], fe.Problem)
		}
		return auth.Spec{}, err
	}
	if expires != "" {
		if spec.Lifetime, err = auth.ParseLifetime(expires); err != nil {
			return auth.Spec{}, fmt.Errorf("--expires: %w", err)
		}
	}
	return spec, nil
}

// tokenScope is a token's scope in words.
func tokenScope(t auth.Token) string {
	switch {
	case t.Sources != nil:
		return "sources " + strings.Join(t.Sources, ",")
	case t.Targets != nil:
		return "targets " + strings.Join(t.Targets, ",")
	}
	return "unscoped"
}

// tokenExpiry is when a token expires, or never.
func tokenExpiry(t auth.Token) string {
	if t.ExpiresAt == nil {
		return "never"
	}
	return t.ExpiresAt.UTC().Format(time.RFC3339)
}

// openCommandDB opens the database of an operator command: the one at url;
// without one, that of the embedded PostgreSQL of dataDir. While a server
// owns dataDir, the command uses its database, through the URL the server
// keeps there, and takes nothing of the directory. Otherwise the command
// owns dataDir until done, under the name command, so no server starts on
// it meanwhile; it starts the PostgreSQL for that time, or uses the one a
// killed server left running. done closes the pool and stops the
// PostgreSQL only if this call started it.
func openCommandDB(ctx context.Context, url, dataDir, command string, stderr io.Writer) (db *pgxpool.Pool, done func(), err error) {
	if url != "" {
		if db, err = openDB(ctx, url, schema.AfterConnect); err != nil {
			return nil, nil, err
		}
		return db, db.Close, nil
	}
	pgDir := filepath.Join(dataDir, "pg")
	if _, err := os.Stat(pgDir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no database in %s: pass the server's --data-dir (env WAYBILL_DATA_DIR), or --database-url (env WAYBILL_DATABASE_URL); `waybill serve` creates the data directory on its first start", pgDir)
	} else if err != nil {
		return nil, nil, fmt.Errorf("data dir: %w", err)
	}
	lock, err := dirlock.Acquire(dataDir, dirlock.Owner{PID: os.Getpid(), Command: command})
	var held *dirlock.HeldError
	if errors.As(err, &held) {
		return openOwnerDB(ctx, dataDir, held)
	}
	if err != nil {
		return nil, nil, err
	}
	var owned service.List
	stop := func() { stopWithin(&owned, resourcesStopBudget) }
	owned.Defer(lock.Release)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dbURL, err := startEmbeddedPostgres(ctx, dataDir, nil, log, &owned)
	if err != nil {
		stop()
		return nil, nil, err
	}
	if db, err = openDB(ctx, dbURL, schema.AfterConnect); err != nil {
		stop()
		return nil, nil, err
	}
	owned.Defer(db.Close)
	return db, stop, nil
}

// openOwnerDB opens the database of the server that owns dataDir, as held
// names it, through the URL file the server keeps there.
func openOwnerDB(ctx context.Context, dataDir string, held *dirlock.HeldError) (*pgxpool.Pool, func(), error) {
	path := filepath.Join(dataDir, databaseURLFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w, and %s does not name its database (yet): try again once it has started, or ended; or pass --database-url", held, path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the URL of the server's database: %w", err)
	}
	db, err := openDB(ctx, strings.TrimSpace(string(data)), schema.AfterConnect)
	if err != nil {
		return nil, nil, fmt.Errorf("%w, but its database does not answer: %w", held, err)
	}
	return db, db.Close, nil
}
