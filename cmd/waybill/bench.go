package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/bench"
	"github.com/waybill/waybill/schema"
)

const benchUsage = `usage: waybill bench [--http] [--messages N] [--clients C] [--rate R] [--slots S] [--concurrency K] [--statements] [--database-url URL] [--cpuprofile FILE]
       waybill bench --backlog N [--clients C] [--slots S] [--concurrency K] [--target-rate R] [--keys K] [--transform EXPR] [--statements] [--database-url URL]

Runs a whole Waybill in this process (its own embedded PostgreSQL in a
temporary directory unless --database-url is given, and its own NATS) with
two http targets served by a local sink, ingests N messages to both from C
clients, and measures until every message is delivered. --http ingests
through the REST API; without it the clients call the commands directly.
--rate bounds the ingest to R messages/s in all (0: as fast as it goes).
Each target takes S attempts at once in the server's process (--slots, 80
by default, 100 in a drain) and, with --concurrency K, at most K across
the cluster (max_concurrent, which the claims count; none by default).

With --backlog N it measures a drain instead: a server in a process of its
own, one http target (--target-rate R gives it rate.per_second R)
disabled while N messages are ingested through the REST API, then
enabled; it reports the drain rate, the
CPU per delivery of the server and of PostgreSQL, claim-to-outcome times,
with a rate the claims' rate past the bucket's burst, the feed's lag and
the server's memory. --keys K makes the target fifo and
gives the messages K ordering keys in turn, so each key's lane drains one
delivery at a time. The messages are JSON ({"id", "amount", "customer"});
--transform EXPR gives the target that transform (docs/routing.md), which
must send every delivery.

--statements loads pg_stat_statements into the embedded PostgreSQL and
prints the costliest statements of the measured run: the ingest and
delivery, or the drain.
`

// runBench runs `waybill bench`: it parses the flags and gives the harness
// the server to measure, as `waybill serve` runs it.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("waybill bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	cfg := bench.DefaultConfig()
	fs.BoolVar(&cfg.HTTP, "http", false, "ingest through the REST API")
	fs.IntVar(&cfg.Messages, "messages", cfg.Messages, "messages to ingest")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients")
	fs.Float64Var(&cfg.Rate, "rate", 0, "messages/s to ingest at, in all; 0 is as fast as it goes")
	stringFromEnv(fs, &cfg.DatabaseURL, "database-url", "WAYBILL_DATABASE_URL", "PostgreSQL `URL`; its database gets the bench's data (env WAYBILL_DATABASE_URL)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write the process's CPU profile of the measured run to this file")
	fs.IntVar(&cfg.Backlog, "backlog", 0, "measure the drain of a backlog of this many deliveries instead")
	fs.IntVar(&cfg.Slots, "slots", 0, "each target's slots in the server's process; 0 is 80, or 100 with --backlog")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "the targets' max_concurrent, across the cluster, their slots no more than it; 0 leaves it out")
	fs.Float64Var(&cfg.TargetRate, "target-rate", 0, "with --backlog: the target's rate.per_second; 0 for none")
	fs.IntVar(&cfg.Keys, "keys", 0, "with --backlog: make the target fifo and spread the messages over this many ordering keys")
	fs.StringVar(&cfg.Signing, "signing", "", "the targets' signing scheme: hmac-sha256 (a new target's default), ed25519 or none")
	fs.StringVar(&cfg.Transform, "transform", "", "with --backlog: the target's transform, a CEL expression over the JSON messages (fields id, amount, customer) that sends every delivery")
	fs.BoolVar(&cfg.Statements, "statements", false, "print the costliest statements of the measured run (pg_stat_statements; the embedded PostgreSQL only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.Serve = func(ctx context.Context, s bench.ServerConfig) error {
		return serve(ctx, &serveConfig{dataDir: s.DataDir, databaseURL: s.DatabaseURL, natsURL: s.NATSURL,
			listen: s.Listen, logFormat: "text", drainGrace: time.Second}, io.Discard)
	}
	cfg.ServeCommand = func(s bench.ServerConfig) (*exec.Cmd, error) {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		// The URL goes in the environment: a command line shows in ps.
		cmd := exec.Command(exe, "serve", "--listen", s.Listen, "--data-dir", s.DataDir, "--log-format", "text")
		cmd.Env = append(os.Environ(), "WAYBILL_DATABASE_URL="+s.DatabaseURL)
		return cmd, nil
	}
	cfg.OpenDB = func(ctx context.Context, url string) (*pgxpool.Pool, error) {
		return openDB(ctx, url, schema.AfterConnect)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "waybill bench: %v\n", err)
		return 2
	}
	if err := bench.Run(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "waybill bench: %v\n", err)
		return 1
	}
	return 0
}
