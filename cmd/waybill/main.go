// Command waybill runs the Waybill service (serve) and its operator
// commands against its database: audit replays the journal and checks it
// and the projections; rebuild recreates the projections from the journal;
// reset drops them; token creates API tokens. messages, lanes, the
// operator's actions (redeliver, skip, redispatch, deliver-now, resend,
// replay) and the
// bulk operations talk to a running server's REST API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/retention"
	"github.com/waybill/waybill/schema"
)

const usage = `usage: waybill <command> [flags]

commands:
  serve    [flags]                              run the service; waybill serve --help lists the flags
  audit    [--message ID] [--archive DIR]       replay the journal and check it against the projections,
                                                and the retention archive (DIR: the archive_dir) against the journal
  rebuild  [--online [--share S]]               recreate the projections from the journal, then audit;
                                                --online beside running servers, switching the new tables in,
                                                its fold working a share S of the time (default 0.5; 1 full speed)
  reset    --projections                        drop the projection tables
  version                                       the build: its module version, its revision and Go's version
  token    create NAME|--name N --role R [--sources S,…|--targets T,…] [--expires 90d]
                                                create an API token (admin, ingest, reader or receipt), maybe
                                                scoped to sources or targets and expiring, and print it
  token    list                                 list the API tokens: id, name, role, scope, created, expires, last used
  token    revoke ID                            revoke an API token (not the last admin token)
  bench    [--http] [--messages N] [--clients C] [--rate R] [--slots S] [--concurrency K] [--signing S] [--statements] [--cpuprofile FILE]
                                                measure ingest-to-delivered throughput and latency
  bench    --backlog N [--clients C] [--slots S] [--concurrency K] [--target-rate R] [--keys K] [--signing S] [--transform EXPR] [--statements]
                                                measure the drain of a backlog of N deliveries

commands that talk to a running server (--server URL or the data dir's server.url; the token
$WAYBILL_TOKEN, else the data dir's admin.token; --token T works too, but shows in ps):
  messages [--status S] [--source S] [--target T] [--ordering-key K] [--type T] [--from F] [--to T]
           [--idempotency-key K] [--possible-duplicates] [--limit N] [--cursor C]
                                                list messages, newest first, a page at a time
  messages show MESSAGE_ID                      a message, its deliveries and its history
  lanes    TARGET [--blocked] [--limit N] [--cursor C]
                                                list a fifo target's lanes: head and deliveries waiting
  redeliver MESSAGE_ID DELIVERY_ID              queue one delivery of a message again
  skip     MESSAGE_ID DELIVERY_ID [--reason R]  settle one delivery of a message without sending it
  redispatch MESSAGE_ID                         match the routes again; add deliveries for new targets
  deliver-now MESSAGE_ID                        make a scheduled message's deliveries due now
  resend   MESSAGE_ID [--target T]... [--reason R]
                                                send the message again, as a new generation, to its targets
  replay   MESSAGE_ID [--reason R]              send the message again, as a new generation, to the targets
                                                the routes match now
  Each action takes --if-version V: it acts only if the message is still at
  the version that messages show printed, else nothing is done.
  operations create --action A [--status S ...] [--target T] [--source S]
                    [--created-after T] [--created-before T] [--reason R] [--dry-run]
                                                act on every message the filter matches, in the background
                                                (redeliver, resend, replay or skip), with its progress until it ends
  operations list [--limit N] [--cursor C]      list the bulk operations, newest first
  operations show ID                            an operation: where it stands and its refusals
  operations cancel ID [--reason R]             stop an operation before its next batch

audit, rebuild, reset and token take --database-url URL, or --data-dir DIR
(default ./var) for the embedded PostgreSQL: that of the server running on
the directory, or, with none running, started for the time of the command,
which owns the directory meanwhile. rebuild and reset need every server
stopped (Ctrl-C or SIGTERM to waybill serve); audit, rebuild --online and
token run beside servers. A data directory has one server: a second serve on it is refused.

Every --database-url defaults to $WAYBILL_DATABASE_URL, --data-dir to
$WAYBILL_DATA_DIR, --token to $WAYBILL_TOKEN: pass a token through the
variable, since a flag's value shows in ps to every user of the machine
(--token warns so on stderr). The server is --server's,
else $WAYBILL_SERVER's, else the one whose URL the data dir's server.url
holds, else http://127.0.0.1:8080.

serve exports OpenTelemetry traces when the standard OTEL_* variables
name an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER; docs/operations.md, Traces).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal stops the service gently; once it is seen, the
	// signals are the runtime's again, so a second one ends the process.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the exit code: 0 done, 1 failed or
// found violations, 2 misused.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if args[0] == "version" {
		if len(args) > 1 {
			fmt.Fprintln(stderr, "waybill version: takes no arguments")
			return 2
		}
		fmt.Fprintln(stdout, version())
		return 0
	}
	fs := flag.NewFlagSet("waybill "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	if args[0] == "serve" {
		cfg := serveFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if err := applyEnv(fs); err != nil {
			fmt.Fprintf(stderr, "waybill serve: %v\n", err)
			return 2
		}
		if err := serve(ctx, cfg, stderr); err != nil {
			fmt.Fprintf(stderr, "waybill serve: %v\n", err)
			return 1
		}
		return 0
	}
	dbURL := new(string)
	stringFromEnv(fs, dbURL, "database-url", "WAYBILL_DATABASE_URL", "PostgreSQL `URL` (env WAYBILL_DATABASE_URL)")
	dataDir := fs.String("data-dir", env("WAYBILL_DATA_DIR", "./var"),
		"data directory of the embedded PostgreSQL, used when no URL is given: that of the server running on it, else started for the command (env WAYBILL_DATA_DIR)")
	var cmd func(context.Context, *pgxpool.Pool) (int, error)
	switch args[0] {
	case "audit":
		message := fs.String("message", "", "audit only this message's stream")
		archive := fs.String("archive", "", "also verify the retention archive against the journal: each batch where its record says, one whose record names no directory in this one (the archive_dir)")
		cmd = func(ctx context.Context, db *pgxpool.Pool) (int, error) {
			id := uuid.Nil
			if *message != "" {
				var err error
				if id, err = uuid.Parse(*message); err != nil {
					return 2, fmt.Errorf("--message: %q is not a message id", *message)
				}
			}
			r, err := projection.Audit(ctx, db, id)
			if err != nil {
				return 1, err
			}
			code := printReport(stdout, "audit", r)
			if *archive == "" {
				return code, nil
			}
			a, err := retention.VerifyArchive(ctx, db, *archive)
			if err != nil {
				return 1, err
			}
			return max(code, printArchiveReport(stdout, a)), nil
		}
	case "rebuild":
		online := fs.Bool("online", false, "rebuild beside running servers, which keep serving, and switch the new tables in")
		share := fs.Float64("share", projection.DefaultShare, "with --online, the share of the time (above 0, at most 1) the fold and its copy work, the rest left to the servers; 1 is full speed")
		cmd = func(ctx context.Context, db *pgxpool.Pool) (int, error) {
			shareSet := false
			fs.Visit(func(f *flag.Flag) { shareSet = shareSet || f.Name == "share" })
			switch {
			case shareSet && !*online:
				return 2, errors.New("--share paces an online rebuild: pass it with --online; an offline rebuild runs at full speed")
			case !(*share > 0 && *share <= 1):
				return 2, fmt.Errorf("--share is %g: a share of the time above 0 and at most 1 is allowed", *share)
			}
			if *online {
				opt := onlineOptions(stderr)
				opt.Share = *share
				r, err := projection.OnlineRebuild(ctx, db, opt)
				if err != nil {
					return 1, err
				}
				return printReport(stdout, "rebuild", r), nil
			}
			r, err := projection.Rebuild(ctx, db)
			if err != nil {
				return 1, err
			}
			return printReport(stdout, "rebuild", r), nil
		}
	case "reset":
		projections := fs.Bool("projections", false, "drop the projection tables (required: nothing else is reset)")
		cmd = func(ctx context.Context, db *pgxpool.Pool) (int, error) {
			if !*projections {
				return 2, errors.New("reset needs --projections: only the projections can be reset; the journal is kept")
			}
			lock, err := schema.LockExclusive(ctx, db)
			if err != nil {
				return 1, err
			}
			defer lock.Release()
			if err := schema.ResetProjections(ctx, db); err != nil {
				return 1, err
			}
			fmt.Fprintln(stdout, "projections dropped; run `waybill rebuild` to fill them from the journal")
			return 0, nil
		}
	case "token":
		return runToken(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "messages", "redeliver", "redispatch", "deliver-now", "skip", "resend", "replay", "lanes":
		return runClient(ctx, args, stdout, stderr)
	case "operations":
		return runOperations(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "waybill: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	db, done, err := openCommandDB(ctx, *dbURL, *dataDir, args[0], stderr)
	if err != nil {
		fmt.Fprintf(stderr, "waybill %s: %v\n", args[0], err)
		return 1
	}
	defer done()
	if args[0] == "audit" {
		// The audit changes nothing, so it runs beside servers; it still
		// needs the tables of this build.
		if err := schema.Ensure(ctx, db); err != nil {
			fmt.Fprintf(stderr, "waybill audit: %v\n", err)
			return 1
		}
	}
	code, err := cmd(ctx, db)
	if err != nil {
		fmt.Fprintf(stderr, "waybill %s: %v\n", args[0], err)
	}
	return code
}

// pauseEnv names a phase of the online rebuild (fold, catch_up, switch)
// in which it stops, its work uncommitted, until the process ends: the
// tests end it there with SIGKILL.
const pauseEnv = "WAYBILL_TEST_REBUILD_PAUSE"

// onlineOptions tell the online rebuild's phases and rounds on stderr.
func onlineOptions(stderr io.Writer) projection.OnlineOptions {
	var last projection.OnlinePhase
	opt := projection.OnlineOptions{
		Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Progress: func(p projection.OnlineProgress) {
			if p.Phase == last && p.Phase != projection.PhaseCatchUp {
				return
			}
			last = p.Phase
			fmt.Fprintf(stderr, "online rebuild: %s; %d events folded of %d in the snapshot, %d read in the last round\n", p.Phase, p.Events, p.Total, p.Lag)
		},
	}
	if phase := projection.OnlinePhase(os.Getenv(pauseEnv)); phase != "" {
		opt.Pause = func(p projection.OnlinePhase) {
			if p == phase {
				fmt.Fprintf(stderr, "online rebuild: paused in %s\n", p)
				select {}
			}
		}
	}
	return opt
}

func printReport(w io.Writer, what string, r *projection.Report) int {
	for _, v := range r.Violations {
		fmt.Fprintf(w, "violation: %s\n", v)
	}
	fmt.Fprintf(w, "%s: %s, %s, %s, %s checked; %s\n", what, lifecycle.Count(r.Events, "event", "events"),
		lifecycle.Count(r.Messages, "message", "messages"), lifecycle.Count(r.Deliveries, "delivery", "deliveries"),
		lifecycle.Count(r.Operations, "operation", "operations"), lifecycle.Count(len(r.Violations), "violation", "violations"))
	if rm := r.Removed; rm.Batches > 0 {
		fmt.Fprintf(w, "retention removed %s of %s in %s (%d after settled_after, %d after failed_after), archived in %s\n",
			lifecycle.Count(rm.Events, "event", "events"), lifecycle.Count(rm.Messages, "message", "messages"),
			lifecycle.Count(rm.Batches, "batch", "batches"), rm.Settled, rm.Faulted, rm.Archive)
	}
	if len(r.Violations) > 0 {
		return 1
	}
	return 0
}

func printArchiveReport(w io.Writer, r *retention.ArchiveReport) int {
	for _, v := range r.Violations {
		fmt.Fprintf(w, "violation: %s\n", v)
	}
	fmt.Fprintf(w, "archive %s: %s, %s, %s checked; %s\n", strings.Join(r.Dirs, ", "), lifecycle.Count(r.Files, "file", "files"),
		lifecycle.Count(r.Events, "event", "events"), lifecycle.Count(r.Messages, "message", "messages"),
		lifecycle.Count(len(r.Violations), "violation", "violations"))
	if len(r.Violations) > 0 {
		return 1
	}
	return 0
}

// version describes the build from what the Go toolchain recorded in it:
// the module's version, the VCS revision and time it was built from (and
// whether the tree had changes), and the Go version. Servers of several
// builds may share a database during an upgrade; this says which is which.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "waybill (no build information), " + runtime.Version()
	}
	v := "waybill " + bi.Main.Version
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		v += " " + rev[:min(12, len(rev))]
		if at := settings["vcs.time"]; at != "" {
			v += " " + at
		}
		if settings["vcs.modified"] == "true" {
			v += " (modified)"
		}
	}
	return v + ", " + bi.GoVersion
}
