package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

const benchUsage = `usage: waybill bench [--http] [--messages N] [--clients C] [--rate R] [--statements] [--database-url URL] [--cpuprofile FILE]
       waybill bench --backlog N [--clients C] [--concurrency K] [--keys K] [--statements] [--database-url URL]

Runs a whole Waybill in this process (its own embedded PostgreSQL in a
temporary directory unless --database-url is given, and its own NATS) with
two http targets served by a local sink, ingests N messages to both from C
clients, and measures until every message is delivered. --http ingests
through the REST API; without it the clients call the commands directly.
--rate bounds the ingest to R messages/s in all (0: as fast as it goes).

With --backlog N it measures a drain instead: a server in a process of its
own, one http target (max_concurrent K) disabled while N messages are
ingested through the REST API, then enabled; it reports the drain rate, the
CPU per delivery of the server and of PostgreSQL, claim-to-outcome times,
the feed's lag and the server's memory. --keys K makes the target fifo and
gives the messages K ordering keys in turn, so each key's lane drains one
delivery at a time.

--statements loads pg_stat_statements into the embedded PostgreSQL and
prints the costliest statements of the measured run: the ingest and
delivery, or the drain.
`

// runBench runs `waybill bench`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("waybill bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	viaHTTP := fs.Bool("http", false, "ingest through the REST API")
	n := fs.Int("messages", 5000, "messages to ingest")
	clients := fs.Int("clients", 8, "concurrent clients")
	rate := fs.Float64("rate", 0, "messages/s to ingest at, in all; 0 is as fast as it goes")
	dbURL := fs.String("database-url", env("WAYBILL_DATABASE_URL", ""), "PostgreSQL URL; its database gets the bench's data (env WAYBILL_DATABASE_URL)")
	cpuProfile := fs.String("cpuprofile", "", "write the process's CPU profile of the measured run to this file")
	backlogN := fs.Int("backlog", 0, "measure the drain of a backlog of this many deliveries instead")
	concurrency := fs.Int("concurrency", 100, "with --backlog: the target's max_concurrent")
	keys := fs.Int("keys", 0, "with --backlog: make the target fifo and spread the messages over this many ordering keys")
	statements := fs.Bool("statements", false, "print the costliest statements of the measured run (pg_stat_statements; the embedded PostgreSQL only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *n < 1 || *clients < 1 || *rate < 0 || *backlogN < 0 || *concurrency < 1 || *keys < 0 {
		fmt.Fprintln(stderr, "waybill bench: --messages, --clients and --concurrency must be at least 1, --rate, --backlog and --keys not negative")
		return 2
	}
	if *backlogN > 0 {
		r, err := backlog(ctx, backlogConfig{messages: *backlogN, clients: *clients, concurrency: *concurrency,
			keys: *keys, dbURL: *dbURL, statements: *statements}, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "waybill bench: %v\n", err)
			return 1
		}
		r.print(stdout)
		return 0
	}
	r, err := bench(ctx, benchConfig{http: *viaHTTP, messages: *n, clients: *clients, rate: *rate, dbURL: *dbURL,
		cpuProfile: *cpuProfile, statements: *statements}, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "waybill bench: %v\n", err)
		return 1
	}
	r.print(stdout)
	return 0
}

type benchConfig struct {
	http       bool
	messages   int
	clients    int
	rate       float64
	dbURL      string
	cpuProfile string
	// statements loads pg_stat_statements into the embedded PostgreSQL and
	// prints the statements that took the most time during the run.
	statements bool
}

type benchResult struct {
	cfg                benchConfig
	elapsed            time.Duration
	ingest, endToEnd   []time.Duration
	deliveries, errors int
	// cpuSelf and cpuHost are the CPU seconds of this process and of the
	// whole machine (PostgreSQL included) during the run; cpuHost is 0
	// where /proc/stat is not readable.
	cpuSelf, cpuHost float64
	statements       []statementCost
}

func (r *benchResult) print(w io.Writer) {
	mode := "commands"
	if r.cfg.http {
		mode = "REST"
	}
	secs := r.elapsed.Seconds()
	fmt.Fprintf(w, "ingest through %s, %d clients, %d messages to 2 targets", mode, r.cfg.clients, r.cfg.messages)
	if r.cfg.rate > 0 {
		fmt.Fprintf(w, " at %.0f messages/s", r.cfg.rate)
	}
	fmt.Fprintf(w, "\n  all delivered in %.2fs: %.0f messages/s, %.0f deliveries/s\n", secs, float64(r.cfg.messages)/secs, float64(r.deliveries)/secs)
	fmt.Fprintf(w, "  ingest call:               p50 %s  p99 %s\n", percentile(r.ingest, 50), percentile(r.ingest, 99))
	fmt.Fprintf(w, "  ingest to last delivered:  p50 %s  p99 %s\n", percentile(r.endToEnd, 50), percentile(r.endToEnd, 99))
	if r.cpuHost > 0 {
		perMessage := 1000 / float64(r.cfg.messages)
		fmt.Fprintf(w, "  CPU per message:           %.2f ms on the machine, %.2f ms in this process\n",
			r.cpuHost*perMessage, r.cpuSelf*perMessage)
	}
	if r.errors > 0 {
		fmt.Fprintf(w, "  %d ingest calls failed\n", r.errors)
	}
	printStatements(w, "the run", r.statements)
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}

// sinkRecord keeps, per message, when each of its deliveries arrived.
type sinkRecord struct {
	mu      sync.Mutex
	arrived map[string][]time.Time
	count   int
	all     chan struct{}
	want    int
}

func (s *sinkRecord) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get("Waybill-Message-Id")
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.arrived[id]) < 2 {
		s.arrived[id] = append(s.arrived[id], time.Now())
		s.count++
		if s.count == s.want {
			close(s.all)
		}
	}
}

func bench(ctx context.Context, cfg benchConfig, stderr io.Writer) (*benchResult, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("", "waybill-bench-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// As root the embedded PostgreSQL runs as the postgres user.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var stack stopStack
	defer stack.run()
	if cfg.dbURL == "" {
		var settings map[string]string
		if cfg.statements {
			settings = statementsSettings
		}
		pg, url, err := startEmbeddedPostgres(ctx, filepath.Join(dir, "var"), settings, log)
		if err != nil {
			return nil, err
		}
		stack.push(stopPostgres(pg, log))
		cfg.dbURL = url
	}
	// Through REST the server runs its own NATS in process, as `waybill
	// serve` does by default; the bench's Writer needs one it can reach too.
	var ns *natsserver.Server
	natsURL := ""
	if !cfg.http {
		if ns, err = natsserver.Start(natsserver.Config{Listen: "127.0.0.1:0"}); err != nil {
			return nil, err
		}
		stack.push(ns.Stop)
		natsURL = ns.ClientURL()
	}
	sink := &sinkRecord{arrived: map[string][]time.Time{}, all: make(chan struct{}), want: 2 * cfg.messages}
	sinkServer := httptest.NewServer(sink)
	stack.push(sinkServer.Close)

	listen, err := freeListenAddr()
	if err != nil {
		return nil, err
	}
	sc := &serveConfig{dataDir: filepath.Join(dir, "var"), databaseURL: cfg.dbURL, natsURL: natsURL,
		listen: listen, logFormat: "text", drainGrace: time.Second}
	serveCtx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serve(serveCtx, sc, io.Discard) }()
	stack.push(func() {
		stopServe()
		<-served
	})
	c, err := newBenchClient(ctx, "http://"+listen, filepath.Join(sc.dataDir, "admin.token"), cfg.clients, served)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"sink-a", "sink-b"} {
		if _, err := c.post("/targets", map[string]any{"name": name, "kind": "http", "enabled": true,
			"max_concurrent": 80, "config": map[string]any{"url": sinkServer.URL}}); err != nil {
			return nil, fmt.Errorf("create target %s: %w", name, err)
		}
		if _, err := c.post("/routes", map[string]any{"source": "bench", "from": "*", "to": "*", "target": name}); err != nil {
			return nil, fmt.Errorf("create route to %s: %w", name, err)
		}
	}

	ingest := func(i int) (string, error) {
		id, err := c.post("/messages", map[string]any{"source": "bench", "from": "a", "to": "b",
			"content_type": "text/plain", "payload": fmt.Sprintf("message %d", i)})
		if err == nil && id == "" {
			err = errors.New("the answer to POST /messages does not begin with the message's id")
		}
		return id, err
	}
	// The commands' clients write through db; --statements reads it in
	// either mode.
	db, err := openDB(ctx, cfg.dbURL)
	if err != nil {
		return nil, err
	}
	stack.push(db.Close)
	if !cfg.http {
		nc, err := ns.Connect()
		if err != nil {
			return nil, err
		}
		stack.push(nc.Close)
		w, err := commands.New(commands.Config{Base: service.Base{Logger: log}, DB: db, Notifier: workers.NewPublisher(nc, log, nil)})
		if err != nil {
			return nil, err
		}
		ingest = func(i int) (string, error) {
			m, _, err := w.Ingest(ctx, commands.NewMessage{Source: "bench", From: "a", To: "b",
				ContentType: "text/plain", Payload: fmt.Appendf(nil, "message %d", i)})
			if err != nil {
				return "", err
			}
			return m.ID.String(), nil
		}
	}

	r := &benchResult{cfg: cfg}
	var (
		mu sync.Mutex
		// sent is when each message's ingest call began: its deliveries
		// may reach the sink before the call returns.
		sent = map[string]time.Time{}
		next = make(chan int)
		wg   sync.WaitGroup
	)
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.statements {
		if err := resetStatements(ctx, db); err != nil {
			return nil, err
		}
	}
	began, selfBefore := time.Now(), cpustat.Self()
	hostBefore, hostOK := cpustat.HostBusy()
	for range cfg.clients {
		wg.Go(func() {
			for i := range next {
				t0 := time.Now()
				id, err := ingest(i)
				t1 := time.Now()
				mu.Lock()
				if err != nil {
					r.errors++
					log.Warn("ingest", "err", err)
				} else {
					sent[id] = t0
					r.ingest = append(r.ingest, t1.Sub(t0))
				}
				mu.Unlock()
			}
		})
	}
	for i := range cfg.messages {
		if cfg.rate > 0 {
			if wait := time.Until(began.Add(time.Duration(float64(i) / cfg.rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if r.errors > 0 {
		return nil, fmt.Errorf("%d of %d ingest calls failed", r.errors, cfg.messages)
	}
	select {
	case <-sink.all:
	case <-time.After(10 * time.Minute):
		return nil, errors.New("not every message was delivered within 10 minutes")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// The sink has every delivery; the last outcomes are being recorded.
	if err := c.waitSettled(ctx); err != nil {
		return nil, err
	}
	r.elapsed = time.Since(began)
	r.cpuSelf = cpustat.Self() - selfBefore
	if hostAfter, ok := cpustat.HostBusy(); ok && hostOK {
		r.cpuHost = hostAfter - hostBefore
	}
	if cfg.statements {
		if r.statements, err = topStatements(ctx, db); err != nil {
			return nil, err
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, at := range sent {
		times := sink.arrived[id]
		r.deliveries += len(times)
		if len(times) > 0 {
			r.endToEnd = append(r.endToEnd, slices.MaxFunc(times, time.Time.Compare).Sub(at))
		}
	}
	return r, nil
}

// benchClient calls the REST API of the bench's server.
type benchClient struct {
	ctx   context.Context
	base  string
	token string
	http  *http.Client
}

// newBenchClient waits for the server to be ready and reads its admin token.
func newBenchClient(ctx context.Context, base, tokenFile string, conns int, served <-chan error) (*benchClient, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-served:
			return nil, fmt.Errorf("the server stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the server was not ready within a minute")
		}
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	return &benchClient{ctx: ctx, base: base, token: strings.TrimSpace(string(token)),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}}, nil
}

// post sends body and returns the id of the resource created.
func (c *benchClient) post(path string, body any) (string, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.base+"/api/v1"+path, bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST %s: %s: %s", path, resp.Status, answer)
	}
	return createdID(answer), nil
}

// createdID reads the id of a created resource, the first member of the
// answer's object, and leaves the rest unread: the bench's clients share
// the machine with the server they measure. It is "" when the answer does
// not begin so.
func createdID(answer []byte) string {
	dec := json.NewDecoder(bytes.NewReader(answer))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	if k, err := dec.Token(); err != nil || k != "id" {
		return ""
	}
	id, _ := dec.Token()
	s, _ := id.(string)
	return s
}

// waitSettled polls the statistics until no message is in flight.
func (c *benchClient) waitSettled(ctx context.Context) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/stats", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := c.http.Do(req)
		if err != nil {
			return err
		}
		var stats struct {
			InFlight int `json:"in_flight_messages"`
		}
		err = json.NewDecoder(resp.Body).Decode(&stats)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		if stats.InFlight == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// freeListenAddr returns a loopback address with a port free just now.
func freeListenAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
