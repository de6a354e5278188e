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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

const tokenUsage = `usage: waybill token create --name N --role R [--database-url URL | --data-dir DIR]

Creates an API token in the database and prints it on standard output; it
cannot be shown again. Roles: admin (everything), ingest (post messages),
reader (read). With no database URL the embedded PostgreSQL of the data
directory is used, which needs the server on it to be stopped.
`

// runToken runs `waybill token create`, which writes to the database
// directly: it needs no running server.
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprint(stderr, tokenUsage)
		if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("waybill token create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tokenUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	name := fs.String("name", "", "the token's name, the subject the journal records its actions under (required)")
	role := fs.String("role", "", "admin, ingest or reader (required)")
	dbURL := fs.String("database-url", env("WAYBILL_DATABASE_URL", ""),
		"PostgreSQL URL of the server's database (env WAYBILL_DATABASE_URL)")
	dataDir := fs.String("data-dir", env("WAYBILL_DATA_DIR", "./var"),
		"data directory of the embedded PostgreSQL, used when no URL is given (env WAYBILL_DATA_DIR)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	misuse := func(msg string) int {
		fmt.Fprintf(stderr, "waybill token create: %s\n", msg)
		return 2
	}
	if fs.NArg() > 0 {
		return misuse(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if *name == "" || *role == "" {
		return misuse("--name and --role are required")
	}
	// Checked before any database is opened, or started.
	if err := lifecycle.CheckName("--name", *name); err != nil {
		return misuse(err.Error())
	}
	r, err := auth.ParseRole(*role)
	if err != nil {
		return misuse("--role: " + err.Error())
	}

	token, err := createToken(ctx, *dbURL, *dataDir, *name, r, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "waybill token create: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, token)
	fmt.Fprintf(stderr, "created a %s token named %s; keep it: it is not stored and cannot be shown again\n", r, *name)
	return 0
}

// createToken opens the database at url, or the embedded one of dataDir
// when url is empty, and creates the token there.
func createToken(ctx context.Context, url, dataDir, name string, role auth.Role, stderr io.Writer) (string, error) {
	db, done, err := openCommandDB(ctx, url, dataDir, stderr)
	if err != nil {
		return "", err
	}
	defer done()
	if err := schema.Ensure(ctx, db); err != nil {
		return "", err
	}
	return auth.NewStore(db).Create(ctx, name, role)
}

// openCommandDB opens the database of an operator command: the one at url,
// or, when url is empty, the embedded PostgreSQL of dataDir, which it starts
// and stops again when done is called. It refuses the embedded database
// while a Waybill server runs on it, whose database the stop would take
// away.
func openCommandDB(ctx context.Context, url, dataDir string, stderr io.Writer) (db *pgxpool.Pool, done func(), err error) {
	var stack stopStack
	defer func() {
		if err != nil {
			stack.run()
		}
	}()
	if url == "" {
		if url, err = startEmbeddedForCommand(ctx, dataDir, stderr, &stack); err != nil {
			return nil, nil, err
		}
	}
	if db, err = openDB(ctx, url); err != nil {
		return nil, nil, err
	}
	stack.push(db.Close)
	if len(stack) > 1 {
		lock, err := schema.LockExclusive(ctx, db)
		if errors.Is(err, schema.ErrDatabaseInUse) {
			db.Close()
			// The PostgreSQL is the server's: leave it running.
			stack = nil
			return nil, nil, fmt.Errorf("a Waybill server is running on the data directory %s: stop it first, or pass the URL of its database with --database-url", dataDir)
		}
		if err != nil {
			return nil, nil, err
		}
		// Commands that need the lock (rebuild, reset) take it themselves.
		lock.Release()
	}
	return db, stack.run, nil
}

// startEmbeddedForCommand starts the embedded PostgreSQL of an existing
// data directory for an operator command, quietly; a directory without one
// is refused rather than initialised, as it is most likely a mistyped path.
func startEmbeddedForCommand(ctx context.Context, dataDir string, stderr io.Writer, stack *stopStack) (string, error) {
	pgDir := filepath.Join(dataDir, "pg")
	if _, err := os.Stat(pgDir); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no database in %s: pass the server's --data-dir (env WAYBILL_DATA_DIR), or --database-url (env WAYBILL_DATABASE_URL); `waybill serve` creates the data directory on its first start", pgDir)
	} else if err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return startEmbeddedPostgres(ctx, dataDir, log, stack)
}
