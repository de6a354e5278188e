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

const tokenUsage = `usage: waybill token create --name N --role R [--database-url URL | --data-dir DIR]
       waybill token list [--database-url URL | --data-dir DIR]
       waybill token revoke ID [--database-url URL | --data-dir DIR]

create makes an API token and prints it on standard output; it cannot be
shown again. Roles: admin (everything), ingest (post messages), reader
(read), receipt (post receipts: for a receiver that confirms its
deliveries). list shows every token's id, name, role and creation, never a
secret. revoke deletes the token with the id list shows (or the whole
token); running servers refuse it within 30 s. The last admin token is not
revoked: create another first.

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
	var name, role *string
	if sub == "create" {
		name = fs.String("name", "", "the token's name, the subject the journal records its actions under (required)")
		role = fs.String("role", "", "admin, ingest, reader or receipt (required)")
	}
	dbURL := fs.String("database-url", env("WAYBILL_DATABASE_URL", ""),
		"PostgreSQL URL of the server's database (env WAYBILL_DATABASE_URL)")
	dataDir := fs.String("data-dir", env("WAYBILL_DATA_DIR", "./var"),
		"data directory of the embedded PostgreSQL, used when no URL is given: that of the server running on it, else started for the command (env WAYBILL_DATA_DIR)")
	rest := args[1:]
	var id string
	if sub == "revoke" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
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
	if sub == "revoke" && id == "" && fs.NArg() > 0 {
		id = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return misuse(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	// Input is checked before any database is opened, or started.
	var r auth.Role
	switch sub {
	case "create":
		if *name == "" || *role == "" {
			return misuse("--name and --role are required")
		}
		if err := lifecycle.CheckName("--name", *name); err != nil {
			return misuse(err.Error())
		}
		var err error
		if r, err = auth.ParseRole(*role); err != nil {
			return misuse("--role: " + err.Error())
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
		token, err := store.Create(ctx, *name, r)
		if err != nil {
			fmt.Fprintf(stderr, "waybill token create: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, token)
		fmt.Fprintf(stderr, "created a %s token named %s; keep it: it is not stored and cannot be shown again\n", r, *name)
	case "list":
		tokens, err := store.List(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "waybill token list: %v\n", err)
			return 1
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tCREATED")
		for _, t := range tokens {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, t.CreatedAt.UTC().Format(time.RFC3339))
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
		if db, err = openDB(ctx, url); err != nil {
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
	if db, err = openDB(ctx, dbURL); err != nil {
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
	db, err := openDB(ctx, strings.TrimSpace(string(data)))
	if err != nil {
		return nil, nil, fmt.Errorf("%w, but its database does not answer: %w", held, err)
	}
	return db, db.Close, nil
}
