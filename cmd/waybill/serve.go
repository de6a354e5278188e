package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/bulk"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/console"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/intake"
	"github.com/waybill/waybill/internal/dirlock"
	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/internal/seal"
	"github.com/waybill/waybill/internal/securefile"
	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/pgserver"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/retention"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sweep"
	"github.com/waybill/waybill/targets"
	"github.com/waybill/waybill/workers"
)

// serveConfig is what `waybill serve` runs with, from its flags, each of
// which defaults to an environment variable.
type serveConfig struct {
	dataDir      string
	databaseURL  string
	natsURL      string
	listen       string
	logFormat    string
	alertWebhook string
	drainGrace   time.Duration
	// shutdownDelay is how long a stopping server stays unready, still
	// serving, before it stops anything: a load balancer's time to notice.
	shutdownDelay time.Duration
	maxPayload    int64
	// metricsListen, when set, is the address of a server of its own
	// for /metrics, without a token; otherwise /metrics is on listen and
	// takes a token.
	metricsListen  string
	trustedProxies prefixList
	secureCookies  bool
	// secretsKeyFile holds the key the targets' signing keys are sealed
	// with; empty: secretsKeyFile in the data directory.
	secretsKeyFile string
}

// secretsKeyFile is the default secrets key file in the data directory,
// made at the first start.
const secretsKeyFile = "secrets.key"

// serveFlags declares the flags of serve on fs.
func serveFlags(fs *flag.FlagSet) *serveConfig {
	c := &serveConfig{}
	fs.StringVar(&c.dataDir, "data-dir", "./var",
		"directory of the embedded PostgreSQL (in <dir>/pg), the admin token and the server's URL; one server per directory (env WAYBILL_DATA_DIR)")
	fs.StringVar(&c.databaseURL, "database-url", "",
		"PostgreSQL URL to use instead of the embedded server (env WAYBILL_DATABASE_URL)")
	fs.StringVar(&c.natsURL, "nats-url", "",
		"NATS server or cluster to use instead of the embedded one (env WAYBILL_NATS_URL)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080",
		"address of the HTTP server: the API, the console, health, and metrics unless --metrics-listen (env WAYBILL_LISTEN)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "",
		"address of a server of its own for /metrics, which takes no token there; without it /metrics is on --listen and takes an unscoped token of any role (env WAYBILL_METRICS_LISTEN)")
	fs.Var(&c.trustedProxies, "trusted-proxies",
		"CIDRs or addresses, comma-separated, of the TLS proxies in front of the server: from them X-Forwarded-Proto: https makes the console's cookies Secure and adds Strict-Transport-Security (env WAYBILL_TRUSTED_PROXIES)")
	fs.BoolVar(&c.secureCookies, "secure-cookies", false,
		"the console is reached over HTTPS only: its cookies are always Secure, its answers carry Strict-Transport-Security (env WAYBILL_SECURE_COOKIES)")
	fs.StringVar(&c.secretsKeyFile, "secrets-key-file", "",
		"file of the key (base64 of 32 bytes) the targets' signing keys are sealed with in the database; every server on one database needs the same; default <data-dir>/"+secretsKeyFile+", made when missing (env WAYBILL_SECRETS_KEY_FILE)")
	fs.StringVar(&c.logFormat, "log-format", "text",
		"log format, text or json (env WAYBILL_LOG_FORMAT)")
	fs.StringVar(&c.alertWebhook, "alert-webhook", "",
		"URL every alert is POSTed to, besides NATS (env WAYBILL_ALERT_WEBHOOK)")
	fs.DurationVar(&c.drainGrace, "drain-grace", 5*time.Second,
		"how long a stop lets attempts in flight finish before it cancels them (env WAYBILL_DRAIN_GRACE)")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay", 2*time.Second,
		"how long a stop keeps serving with /readyz answering 503, so a load balancer stops sending first, before it stops anything (env WAYBILL_SHUTDOWN_DELAY)")
	fs.Int64Var(&c.maxPayload, "max-payload", lifecycle.DefaultMaxPayload,
		"largest request body the API takes, largest file or row a source takes, and largest payload a target's transform makes, in bytes (env WAYBILL_MAX_PAYLOAD)")
	return c
}

// applyEnv sets every flag of fs not given on the command line from its
// environment variable (envName), when that is set; a value the flag
// refuses is an error naming the variable.
func applyEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok && !given[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// prefixList is the value of --trusted-proxies: CIDRs, or addresses that
// each stand for themselves alone, comma-separated.
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, prefix := range *p {
		s[i] = prefix.String()
	}
	return strings.Join(s, ",")
}

// Set reads the whole list, which replaces any value before it.
func (p *prefixList) Set(v string) error {
	var out prefixList
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if prefix, err := netip.ParsePrefix(item); err == nil {
			out = append(out, prefix.Masked())
		} else if addr, err := netip.ParseAddr(item); err == nil {
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
		} else {
			return fmt.Errorf("%q is neither a CIDR (10.0.0.0/8, fd00::/8) nor an address", item)
		}
	}
	*p = out
	return nil
}

// loadSecrets reads the secrets key: the file given, which must exist, or
// the data directory's own, made at the first start.
func loadSecrets(cfg *serveConfig) (*seal.Box, error) {
	if cfg.secretsKeyFile != "" {
		box, err := seal.LoadFile(cfg.secretsKeyFile, false)
		if err != nil {
			return nil, fmt.Errorf("--secrets-key-file: %w", err)
		}
		return box, nil
	}
	return seal.LoadFile(filepath.Join(cfg.dataDir, secretsKeyFile), true)
}

// envName is the environment variable of a flag of serve: WAYBILL_ and the
// flag's name in capitals with '_' for '-'.
func envName(flagName string) string {
	return "WAYBILL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// natsServers is a --nats-url as errors show it: each server's address
// with its user, password or token masked.
func natsServers(list string) string {
	servers := strings.Split(list, ",")
	for i, s := range servers {
		u, err := url.Parse(strings.TrimSpace(s))
		switch {
		case err != nil:
			servers[i] = "(a server that is not a URL)"
		case u.User != nil:
			u.User = url.User(redact.Mask)
			servers[i] = u.String()
		}
	}
	return strings.Join(servers, ",")
}

// stringFromEnv defines a string flag whose default is the environment
// variable env, kept out of the usage that -help and a mistyped flag print:
// it may hold a secret (a database URL's password, a token).
func stringFromEnv(fs *flag.FlagSet, p *string, name, env, usage string) {
	*p = os.Getenv(env)
	fs.Var((*unshownString)(p), name, usage)
}

// unshownString is a string flag.Value whose value the usage never shows.
type unshownString string

func (s *unshownString) Set(v string) error { *s = unshownString(v); return nil }

func (s *unshownString) String() string { return "" }

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(tracing.LogHandler(slog.NewTextHandler(w, nil))), nil
	case "json":
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(w, nil))), nil
	}
	return nil, fmt.Errorf("--log-format: %q: allowed are text, json", format)
}

// gcPercent is the collector's target when GOGC is not set. The live heap
// is a few tens of MB and every message allocates, so collecting at 400
// rather than Go's 100 saves about a sixth of the process's CPU for about
// 20 MB more memory (docs/performance.md).
const gcPercent = 400

// serve runs the service until ctx ends, then stops it in the reverse order
// of its start, so nothing claims while anything it needs is gone.
func serve(ctx context.Context, cfg *serveConfig, stderr io.Writer) error {
	if cfg.maxPayload < 0 {
		return fmt.Errorf("--max-payload: %d: must be a number of bytes (0 for the default, %d)", cfg.maxPayload, lifecycle.DefaultMaxPayload)
	}
	log, err := newLogger(cfg.logFormat, stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	traceCfg, err := tracing.FromEnv()
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	// What the services stand on: the data directory's lock, the listener,
	// the database, NATS. It stops after the services, in reverse, with a
	// budget of its own, so that the PostgreSQL this process started shuts
	// down cleanly however long the services took.
	var resources service.List
	defer stopWithin(&resources, resourcesStopBudget)

	// The data directory has one owner: a second server on it is refused
	// here, before it starts, adopts or writes anything.
	if err := privateDataDir(cfg.dataDir, cfg.databaseURL == "", log); err != nil {
		return err
	}
	owner := dirlock.Owner{PID: os.Getpid(), Command: "serve"}
	dirLock, err := dirlock.Acquire(cfg.dataDir, owner)
	if err != nil {
		return err
	}
	resources.Defer(dirLock.Release)
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}
	resources.Defer(func() { _ = l.Close() })
	var metricsL net.Listener
	if cfg.metricsListen != "" {
		if metricsL, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			return fmt.Errorf("listen for metrics on %s: %w", cfg.metricsListen, err)
		}
		resources.Defer(func() { _ = metricsL.Close() })
	}
	serverURL := dialURL(l.Addr().(*net.TCPAddr))
	owner.URL = serverURL
	if err := dirLock.Record(owner); err != nil {
		return err
	}
	secrets, err := loadSecrets(cfg)
	if err != nil {
		return err
	}

	dbURL := cfg.databaseURL
	if dbURL == "" {
		url, err := startEmbeddedPostgres(ctx, cfg.dataDir, nil, log, &resources)
		if err != nil {
			return err
		}
		dbURL = url
	}
	// Each connection holds the server lock shared (schema.ServerAfterConnect):
	// a rebuild or a reset refuses while this server runs, and this server
	// neither starts nor writes while one runs.
	db, err := openDB(ctx, dbURL, schema.ServerAfterConnect)
	if err != nil {
		return err
	}
	resources.Defer(db.Close)
	resources.Defer(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		schema.ReleaseServer(ctx, db)
	})
	if err := ensureOwnProjections(ctx, db, l, log); err != nil {
		return err
	}
	if err := secrets.Check(ctx, db); err != nil {
		return fmt.Errorf("%w: every server on one database seals with one key; give this one the --secrets-key-file (env WAYBILL_SECRETS_KEY_FILE) of the others", err)
	}
	if cfg.databaseURL == "" {
		// The operator's commands on this data directory (audit, token)
		// find the server's database through this file.
		if err := writeRunFile(cfg.dataDir, databaseURLFile, dbURL, "the database's URL", log, &resources); err != nil {
			return err
		}
	}
	// The spans still held are exported when the provider stops, after
	// every service that makes them.
	tracer, err := tracing.New(ctx, traceCfg, log)
	if err != nil {
		return err
	}
	if err := resources.Start(ctx, "tracing", tracer); err != nil {
		return err
	}
	// One clock, one logger and one tracer for every part of the process.
	base := service.Base{Now: time.Now, Logger: log, Tracer: tracer.Tracer()}
	tokens := auth.NewStore(db, base.Now)
	tokenFile := filepath.Join(cfg.dataDir, auth.AdminTokenFile)
	firstStart, err := tokens.EnsureAdminToken(ctx, tokenFile)
	if err != nil {
		return err
	}

	nc, err := connectNATS(ctx, cfg.natsURL, log, &resources)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := workers.NewMetrics(reg)
	w, err := commands.New(commands.Config{Base: base, DB: db, Notifier: workers.NewPublisher(nc, log, metrics), Observer: metrics,
		Secrets: secrets, MaxPayload: cfg.maxPayload})
	if err != nil {
		return err
	}
	rt, err := workers.NewRuntime(workers.RuntimeConfig{Base: base, Writer: w, NATS: nc, DrainGrace: cfg.drainGrace, Metrics: metrics})
	if err != nil {
		return err
	}
	runner, err := bulk.New(bulk.Config{Base: base, Writer: w, DB: db, Registerer: reg})
	if err != nil {
		return err
	}
	rebuilds := httpapi.NewRebuilds(base, db)
	api, err := httpapi.New(httpapi.Config{Base: base, Writer: w, DB: db, Auth: tokens, Tokens: tokens, MaxPayload: cfg.maxPayload,
		Registerer: reg, OnConfigChange: rt.ConfigChanged, OnOperation: runner.Wake, Rebuilds: rebuilds})
	if err != nil {
		return err
	}
	ui, err := console.New(console.Config{Base: base, Writer: w, DB: db, Tokens: tokens, OnConfigChange: rt.ConfigChanged,
		OnOperation: runner.Wake, TrustedProxies: cfg.trustedProxies, SecureCookies: cfg.secureCookies, Rebuilds: rebuilds})
	if err != nil {
		return err
	}
	var ready, moved atomic.Bool
	scrape := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
	web := newHTTPService(l, mainMux(api, ui, db, metricsL == nil, scrape, &ready, &moved), log)
	servers := []namedService{{"http server", web}}
	metricsURL := "http://" + web.addr() + "/metrics"
	if metricsL != nil {
		// The metrics' own server serves nothing else.
		only := http.NewServeMux()
		only.Handle("GET /metrics", scrape)
		m := newHTTPService(metricsL, only, log)
		servers = append(servers, namedService{"metrics server", m})
		metricsURL = "http://" + m.addr() + "/metrics"
	}
	alerter, err := alerts.New(alerts.Config{Base: base, DB: db, NATS: nc, WebhookURL: cfg.alertWebhook, Metrics: reg,
		WebhookKeys: func(ctx context.Context) ([]targets.Key, error) { return w.OwnKeys(ctx, lifecycle.KeyOwnerAlerts) }})
	if err != nil {
		return err
	}
	events, err := alerts.NewEventStream(alerts.StreamConfig{Base: base, DB: db, NATS: nc, Metrics: reg})
	if err != nil {
		return err
	}
	sw, err := sweep.New(sweep.Config{Base: base, Writer: w, DB: db, Registerer: reg})
	if err != nil {
		return err
	}
	callbacks, err := workers.NewCallbacks(workers.CallbackConfig{Base: base, Writer: w, DrainGrace: cfg.drainGrace, Registerer: reg})
	if err != nil {
		return err
	}
	sources, err := intake.New(intake.Config{Base: base, Writer: w, DB: db, NATS: nc, Metrics: intake.NewMetrics(reg),
		MaxPayload: cfg.maxPayload})
	if err != nil {
		return err
	}
	// Retention removes an event only once the feed's groups this process
	// runs have passed it.
	ret, err := retention.New(retention.Config{Base: base, Writer: w, DB: db, Registerer: reg,
		FeedGroups: []string{alerts.AlerterGroup, alerts.StreamGroup}})
	if err != nil {
		return err
	}

	// A change of the settings, made by any process, may set or shorten
	// retention's periods: its next pass should not wait for the interval
	// of the old ones.
	sub, err := nc.Subscribe(workers.ConfigSubject, func(*nats.Msg) { ret.Wake() })
	if err != nil {
		return fmt.Errorf("subscribe to configuration changes: %w", err)
	}
	resources.Defer(func() { _ = sub.Unsubscribe() })

	// The services start in this order and stop in the reverse: the
	// sources first, so nothing comes in while the rest stops, then the
	// bulk operations' runner, retention and the sweep, then the workers,
	// each before anything they use, and the console's live histories
	// just before the HTTP server, whose stop waits for them. The sweep's
	// first pass runs after the workers subscribed, so its wake-ups find
	// them, and so do the sources' first messages. The loops are a list of
	// their own, which stops alone when the projections become another
	// build's, the HTTP server answering 503 from then on.
	var front, services service.List
	defer stopWithin(&front, stopBudget)
	defer stopWithin(&services, cfg.drainGrace+stopBudget)
	for _, s := range append(servers, namedService{"console", ui}) {
		if err := front.Start(ctx, s.name, s.s); err != nil {
			return err
		}
	}
	for _, s := range []namedService{{"alerter", alerter}, {"event stream", events}, {"runtime", rt}, {"callbacks", callbacks},
		{"sweep", sw}, {"retention", ret}, {"bulk operations", runner}, {"sources", sources}} {
		if err := services.Start(ctx, s.name, s.s); err != nil {
			return err
		}
	}
	services.Defer(func() { ready.Store(false) })

	// The client commands on this data directory find the server through
	// this file, there once the server is ready.
	if err := writeRunFile(cfg.dataDir, serverURLFile, serverURL, "the server's URL", log, &services); err != nil {
		return err
	}
	ready.Store(true)
	log.Info("waybill serving", "api", "http://"+web.addr()+"/api/v1", "console", "http://"+web.addr()+console.Prefix,
		"metrics", metricsURL, "version", version())
	if firstStart {
		abs, _ := filepath.Abs(tokenFile)
		fmt.Fprintf(stderr, "\nWaybill is up: the API is at http://%s/api/v1, the console at http://%s/ui/\n"+
			"The admin token is in %s (readable only by its owner); the console's sign-in takes it, and so does the API:\n"+
			"  curl -H \"Authorization: Bearer $(cat %s)\" http://%s/api/v1/stats\n\n",
			web.addr(), web.addr(), abs, abs, web.addr())
	}
	select {
	case <-ctx.Done():
	case stored := <-projectionsMoved(ctx, db):
		// An online rebuild of another build switched the tables: the
		// journal refuses this server's writes already; it stops its
		// loops and answers 503 until it is replaced.
		log.Warn("the projections are another build's: this server writes nothing more and answers 503; replace it with a server of that build",
			"stored", stored, "build", schema.ProjectionVersion)
		moved.Store(true)
		ready.Store(false)
		stopWithin(&services, cfg.drainGrace+stopBudget)
		log.Info("every loop stopped: answering 503 until this server is stopped")
		<-ctx.Done()
	}
	unready(&ready, cfg.shutdownDelay, log)
	log.Info("stopping: no more claims; attempts in flight get the drain grace", "drain_grace", cfg.drainGrace)
	return nil
}

// unready is the first step of a stop: /readyz answers 503 at once, while
// everything else still serves for delay, so a load balancer that probes
// it stops sending here before the listener closes. A second signal ends
// the process, delay or not (main).
func unready(ready *atomic.Bool, delay time.Duration, log *slog.Logger) {
	ready.Store(false)
	if delay <= 0 {
		return
	}
	log.Info("stopping: unready, still serving", "shutdown_delay", delay)
	time.Sleep(delay)
}

// namedService is a service with the name its start and stop are logged
// under.
type namedService struct {
	name string
	s    service.Service
}

// stopWithin stops l within budget, counted from now.
func stopWithin(l *service.List, budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	l.Stop(ctx)
}

const (
	// databaseURLFile, in the data directory, holds the URL of the
	// embedded PostgreSQL's waybill database while a server runs on it,
	// readable only by the owner: the operator's commands connect through
	// it, and so can psql.
	databaseURLFile = "database.url"

	// serverURLFile, in the data directory, holds the URL the server
	// running on it answers at, from the moment it is ready: the client
	// commands find it through this file.
	serverURLFile = "server.url"
)

// writeRunFile writes value and a newline to the file name in dataDir,
// readable only by the owner, and defers its removal on l: the file says
// what is true only while the server runs. what names it in errors.
func writeRunFile(dataDir, name, value, what string, log *slog.Logger, l *service.List) error {
	path := filepath.Join(dataDir, name)
	if err := securefile.Write(path, []byte(value+"\n")); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	l.Defer(func() {
		if err := os.Remove(path); err != nil {
			log.Warn("remove "+what, "path", path, "err", err)
		}
	})
	return nil
}

// dialURL is the http URL a client on this machine uses to reach a
// listener on addr: an unspecified host (0.0.0.0, ::) is reached on
// loopback.
func dialURL(addr *net.TCPAddr) string {
	ip := addr.IP
	switch {
	case ip.To4() != nil && ip.IsUnspecified():
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port))
}

// privateDataDir makes the data directory private (pgserver.PrivateDir),
// as what it holds is secret (the admin token, the database's URL and its
// files): a directory that was open to others is closed, with a warning.
// withServer says it holds the embedded PostgreSQL.
func privateDataDir(dir string, withServer bool, log *slog.Logger) error {
	was, err := pgserver.PrivateDir(dir, withServer)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if was != 0 {
		log.Warn("the data directory's mode was changed: what it holds is for waybill alone", "data_dir", dir, "was", was.String())
	}
	return nil
}

// startEmbeddedPostgres starts the PostgreSQL of the data directory on l,
// with settings as extra server settings (nil for none), or adopts the one
// already running on it, and returns the URL of its waybill database as
// the waybill role, which owns it and is no superuser, both created on
// first use (pgserver.Server.CreateOwnedDatabase). l's Stop stops the server, unless it was adopted.
func startEmbeddedPostgres(ctx context.Context, dataDir string, settings map[string]string, log *slog.Logger, l *service.List) (string, error) {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	if err := privateDataDir(dir, true, log); err != nil {
		return "", err
	}
	srv := pgserver.New(pgserver.Config{DataDir: filepath.Join(dir, "pg"), Logger: log, Settings: settings})
	err = l.Start(ctx, "embedded postgres", srv)
	if errors.Is(err, pgserver.ErrNoBinaries) {
		return "", fmt.Errorf("no database: %w; install the PostgreSQL server binaries (initdb, postgres) or pass --database-url (env WAYBILL_DATABASE_URL)", err)
	}
	if err != nil {
		return "", err
	}
	url, err := srv.CreateOwnedDatabase(ctx, "waybill")
	if err != nil {
		return "", fmt.Errorf("embedded postgres: %w", err)
	}
	log.Info("embedded postgres", "data_dir", filepath.Join(dir, "pg"))
	return url, nil
}

// openDB opens the pool every part of the process shares. A session left
// idle inside a transaction is ended after a minute: such a transaction
// holds back the journal feed, which reads only below the oldest one open.
// JIT compilation is off: the statements are short lookups run as
// prepared statements, whose generic plans' estimates (an array of ids is
// guessed at ten rows, joined to a guess) often pass jit_above_cost, and
// compiling one took 100 to 200 ms where running it takes one
// (performance.md).
func openDB(ctx context.Context, url string, afterConnect func(context.Context, *pgx.Conn) error) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "60000"
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	cfg.ConnConfig.RuntimeParams["application_name"] = "waybill"
	cfg.AfterConnect = afterConnect
	if cfg.MaxConns < 32 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = 32
	}
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	return db, nil
}

// minNATSPayload is the least max_payload a NATS server may have: an
// event published without its payload, or an alert with its texts cut,
// must still fit, or the event stream or the alerts would stop at it for
// good. Both are a few hundred bytes, their names and ids bounded; NATS's
// own default is 1 MB.
const minNATSPayload = 64 << 10

// connectNATS connects to the NATS at url, or to an embedded server it
// starts on l when url is empty; l's Stop closes the connection, then the
// server.
func connectNATS(ctx context.Context, url string, log *slog.Logger, l *service.List) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("waybill"), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Debug("nats", "subject", subject, "err", err)
		})}
	if url != "" {
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to nats %s: %w", natsServers(url), err)
		}
		if limit := nc.MaxPayload(); limit < minNATSPayload {
			nc.Close()
			return nil, fmt.Errorf("connect to nats %s: its max_payload is %d bytes; Waybill needs at least %d, to publish an event without its payload or an alert cut to fit",
				natsServers(url), limit, minNATSPayload)
		}
		l.Defer(nc.Close)
		return nc, nil
	}
	ns := natsserver.New(natsserver.Config{})
	if err := l.Start(ctx, "embedded nats", ns); err != nil {
		return nil, err
	}
	nc, err := ns.Connect(opts...)
	if err != nil {
		return nil, err
	}
	l.Defer(nc.Close)
	return nc, nil
}

// stopBudget is what a stop gives the services beyond the workers' drain
// grace: the outcomes being recorded, the feed's consumers saving their
// places, the HTTP server's last answers.
const stopBudget = 20 * time.Second

// resourcesStopBudget is what a stop gives what the services stand on,
// after them: mostly the embedded PostgreSQL's fast shutdown, before it is
// sent SIGQUIT.
const resourcesStopBudget = 30 * time.Second

// httpService is an HTTP server on a listener: the main one, or the
// metrics' own.
type httpService struct {
	srv *http.Server
	l   net.Listener
	log *slog.Logger
}

// mainMux serves the API, the console, the health checks and, when
// withMetrics, the metrics to an unscoped token of any role: /healthz answers while
// the process runs, /readyz only while the database answers and every
// service has started.
func mainMux(api *httpapi.Server, ui *console.Console, db *pgxpool.Pool, withMetrics bool, metrics http.Handler, ready, moved *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(httpapi.Prefix+"/", api)
	mux.Handle(console.Prefix, ui)
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
	if withMetrics {
		mux.Handle("GET /metrics", api.Authenticated(metrics))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		switch {
		case !ready.Load():
			w.Header().Set("Retry-After", "1")
			http.Error(w, "starting or stopping", http.StatusServiceUnavailable)
		case db.Ping(ctx) != nil:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	// While it is not ready, and so while a stop's delay runs, each
	// answer closes its connection: the client's next request opens a new
	// one, which a load balancer sends elsewhere. Idle connections are left
	// alone until the listener closes: closing one as a client picks it
	// would reset that client's request.
	gone := unavailable(httpapi.ProjectionsMovedMessage)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			w.Header().Set("Connection", "close")
		}
		if moved.Load() && r.URL.Path != "/readyz" {
			gone.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// newHTTPService serves handler on l, taken before anything else starts
// so the address is known and a busy one fails the start at once.
func newHTTPService(l net.Listener, handler http.Handler, log *slog.Logger) *httpService {
	srv := &http.Server{
		Addr:              l.Addr().String(),
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	return &httpService{srv: srv, l: l, log: log}
}

func (h *httpService) addr() string { return h.srv.Addr }

// Start serves on the listener.
func (h *httpService) Start(context.Context) error {
	go func() {
		if err := h.srv.Serve(h.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// Stop lets the requests being served finish within ctx, then closes; the
// listener is closed even when the service never started.
func (h *httpService) Stop(ctx context.Context) {
	if err := h.srv.Shutdown(ctx); err != nil {
		h.log.Warn("http server stop", "err", err)
		_ = h.srv.Close()
	}
	_ = h.l.Close()
}

// projectionsPoll is how often a server whose build's projections are not
// the database's looks again.
const projectionsPoll = time.Second

// ensureOwnProjections runs schema.Ensure. When the database's projections
// are of another version than this build's (an upgrade with a changed
// model), it does not fail: it answers every request on l 503, with
// Retry-After, saying to run this build's `waybill rebuild --online`
// (readyz unready), until the projections are this build's, then ensures
// again and returns with l open for the service.
func ensureOwnProjections(ctx context.Context, db *pgxpool.Pool, l net.Listener, log *slog.Logger) error {
	err := schema.Ensure(ctx, db)
	var version *schema.VersionError
	if !errors.As(err, &version) || version.Part != schema.PartProjections {
		return err
	}
	msg := fmt.Sprintf("the database's projections are version %d and this server's build uses %d: it serves when they are its own; run this build's `waybill rebuild --online` beside the running servers", version.Stored, version.Code)
	if version.Stored > version.Code {
		msg = fmt.Sprintf("the database's projections are version %d, newer than this server's build's %d: run the newer build", version.Stored, version.Code)
	}
	log.Warn("waiting for the projections of this build", "stored", version.Stored, "build", version.Code,
		"run", "waybill rebuild --online")
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: unavailable(msg)}
	held := &heldListener{TCPListener: l.(*net.TCPListener)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(held)
	}()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
		_ = held.SetDeadline(time.Time{})
	}()
	if _, err := pollProjections(ctx, db, func(stored int) bool { return stored == schema.ProjectionVersion }); err != nil {
		return err
	}
	log.Info("the projections are this build's: starting")
	return schema.Ensure(ctx, db)
}

// projectionsMoved gives the projections' version once it is no longer
// this build's; it never gives one when ctx ends first.
func projectionsMoved(ctx context.Context, db *pgxpool.Pool) <-chan int {
	moved := make(chan int, 1)
	go func() {
		if stored, err := pollProjections(ctx, db, func(stored int) bool { return stored != schema.ProjectionVersion }); err == nil {
			moved <- stored
		}
	}()
	return moved
}

// pollProjections reads the projections' version every projectionsPoll
// until done says it is the one awaited, and returns it; a read that fails
// (the database away) is tried again at the next.
func pollProjections(ctx context.Context, db *pgxpool.Pool, done func(stored int) bool) (int, error) {
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(projectionsPoll):
		}
		stored, err := schema.StoredVersion(ctx, db, schema.PartProjections)
		if err == nil && done(stored) {
			return stored, nil
		}
	}
}

// unavailable answers every request but /healthz 503 with Retry-After and
// msg in the API's error envelope, closing each connection: the answer of
// a server whose build's projections are not the database's.
func unavailable(msg string) http.Handler {
	body, _ := plainjson.Marshal(httpapi.ErrorResponse{Error: httpapi.ErrorBody{Code: httpapi.CodeUnavailable, Message: msg}})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			fmt.Fprintln(w, "ok")
			return
		}
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(append(body, '\n'))
	})
}

// heldListener is the listener a server answers on while it waits for
// its projections, kept open when that answering stops: its Close only
// ends the Accept under way (a deadline in the past), and the service
// then serves on the listener itself.
type heldListener struct{ *net.TCPListener }

func (l *heldListener) Close() error { return l.SetDeadline(time.Unix(1, 0)) }
