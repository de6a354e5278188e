package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/pgserver"
)

// backlogConfig is what `waybill bench --backlog N` runs with.
type backlogConfig struct {
	messages    int
	clients     int
	concurrency int
	// keys, when not 0, makes the target fifo and spreads the messages
	// over that many ordering keys, in turn: each key's lane drains one
	// delivery at a time.
	keys  int
	dbURL string
	// statements loads pg_stat_statements into the embedded PostgreSQL and
	// prints the statements that took the most time during the drain.
	statements bool
}

// backlogResult is what a backlog run measured.
type backlogResult struct {
	cfg backlogConfig
	// ingest is the time to ingest the backlog with the target disabled,
	// drain the time from enabling it until every delivery is recorded.
	ingest, drain time.Duration
	// serverCPU and pgCPU are the CPU seconds of the server process and of
	// the PostgreSQL server during the drain; pgCPU is 0 when the server
	// is not this bench's own. selfCPU is this process's (the sink's and
	// the bench's). idle is the share of the machine's cores left idle
	// from the enabling to the last delivery, what the drain did not use
	// (negative when /proc/stat could not be read).
	serverCPU, pgCPU, selfCPU float64
	idle                      float64
	// claimToOutcome are, per delivery, the time from its claim to its
	// recorded outcome.
	claimToOutcome []time.Duration
	// feedLag is the largest lag in seconds of the feed's groups seen
	// during the drain; peakRSS the server's high-water mark in bytes and
	// rssDuring its resident size at each sample.
	feedLag   float64
	peakRSS   int64
	rssDuring []int64
	// sentTwice counts deliveries the sink received more than once.
	sentTwice  int
	statements []statementCost
	// batches are the drain's transactions in the order they began writing
	// events, with the claims and outcomes each recorded.
	batches []batch
}

// batch is one transaction of the drain, as its journal events show it.
type batch struct{ claims, outcomes int }

// batchMeans is the mean number of claims per transaction that claimed and
// of outcomes per transaction that recorded one, over bs.
func batchMeans(bs []batch) (claims, outcomes float64) {
	var c, ct, o, ot int
	for _, b := range bs {
		if b.claims > 0 {
			c, ct = c+b.claims, ct+1
		}
		if b.outcomes > 0 {
			o, ot = o+b.outcomes, ot+1
		}
	}
	return float64(c) / float64(max(ct, 1)), float64(o) / float64(max(ot, 1))
}

type statementCost struct {
	query       string
	calls       int64
	totalMS     float64
	planMS      float64
	rows        int64
	sharedReads int64
}

func (r *backlogResult) print(w io.Writer) {
	n := float64(r.cfg.messages)
	order := "unordered"
	if r.cfg.keys > 0 {
		order = fmt.Sprintf("fifo over %d ordering keys", r.cfg.keys)
	}
	fmt.Fprintf(w, "backlog of %d deliveries to one http target (max_concurrent %d, %s), ingested through REST by %d clients with the target disabled\n",
		r.cfg.messages, r.cfg.concurrency, order, r.cfg.clients)
	fmt.Fprintf(w, "  ingest: %.2fs, %.0f messages/s\n", r.ingest.Seconds(), n/r.ingest.Seconds())
	fmt.Fprintf(w, "  drain:  %.2fs, %.0f deliveries/s\n", r.drain.Seconds(), n/r.drain.Seconds())
	fmt.Fprintf(w, "  CPU per delivery during the drain: server %.3f ms", 1000*r.serverCPU/n)
	if r.pgCPU > 0 {
		fmt.Fprintf(w, ", PostgreSQL %.3f ms", 1000*r.pgCPU/n)
	}
	fmt.Fprintf(w, ", the bench and its sink %.3f ms", 1000*r.selfCPU/n)
	if r.idle >= 0 {
		fmt.Fprintf(w, "; the machine's cores %.0f %% idle", 100*r.idle)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  claim to outcome: p50 %s  p99 %s\n", percentile(r.claimToOutcome, 50), percentile(r.claimToOutcome, 99))
	if len(r.batches) > 0 {
		// The batches' sizes by tenth of the drain show whether they grew
		// or shrank as it went, and with them the cost of a delivery.
		claims, outcomes := batchMeans(r.batches)
		fmt.Fprintf(w, "  per transaction: %.1f claims, %.1f outcomes; by tenth of the drain:", claims, outcomes)
		for i := range 10 {
			c, o := batchMeans(r.batches[i*len(r.batches)/10 : (i+1)*len(r.batches)/10])
			fmt.Fprintf(w, " %.0f/%.0f", c, o)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  feed lag during the drain: at most %.1fs\n", r.feedLag)
	if len(r.rssDuring) > 0 {
		fmt.Fprintf(w, "  server RSS: peak %d MB; during the drain %d to %d MB\n", r.peakRSS>>20,
			slices.Min(r.rssDuring)>>20, slices.Max(r.rssDuring)>>20)
	}
	if r.sentTwice > 0 {
		fmt.Fprintf(w, "  %d deliveries reached the sink more than once\n", r.sentTwice)
	}
	printStatements(w, "the drain", r.statements)
}

// countingSink answers 200 at once and counts what it receives, by
// idempotency key.
type countingSink struct {
	mu    sync.Mutex
	seen  map[string]bool
	twice int
	count atomic.Int64
	// last is when the latest new delivery arrived: the drain's end is
	// read from it, not from the polling loop that waits for it. busyAtEnd
	// is the machine's busy CPU time when the want-th one arrived, so that
	// the share of idle cores is the drain's, without the wait after it.
	last      time.Time
	want      int64
	busyAtEnd float64
}

func (s *countingSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	if s.seen[key] {
		s.twice++
	} else {
		s.seen[key] = true
		s.last = time.Now()
		if s.count.Add(1) == s.want {
			s.busyAtEnd, _ = cpustat.HostBusy()
		}
	}
	s.mu.Unlock()
}

// backlog runs the drain benchmark: a server in a process of its own (so
// its CPU and memory are its own), on the embedded PostgreSQL with fsync on
// or on --database-url, one http target disabled while the backlog is
// ingested, then enabled.
func backlog(ctx context.Context, cfg backlogConfig, stderr io.Writer) (*backlogResult, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("", "waybill-backlog-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var stack stopStack
	defer stack.run()
	pgPID := 0
	if cfg.dbURL == "" {
		settings := map[string]string{"max_connections": "200"}
		if cfg.statements {
			maps.Copy(settings, statementsSettings)
		}
		srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "pg"), Logger: log, Settings: settings})
		if err != nil {
			return nil, err
		}
		stack.push(func() { _ = srv.Stop(context.Background()) })
		if err := createDatabase(ctx, srv.URL("postgres"), "waybill"); err != nil {
			return nil, err
		}
		cfg.dbURL = srv.URL("waybill")
	}
	db, err := openDB(ctx, cfg.dbURL)
	if err != nil {
		return nil, err
	}
	stack.push(db.Close)
	// The server's CPU is measured when it runs on this machine and its
	// data directory is readable.
	var pgDir string
	if db.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&pgDir) == nil {
		pgPID = readPostmasterPID(pgDir)
	}

	sink := &countingSink{seen: make(map[string]bool, cfg.messages), want: int64(cfg.messages)}
	sinkServer := httptest.NewServer(sink)
	stack.push(sinkServer.Close)

	listen, err := freeListenAddr()
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "var")
	server := exec.Command(exe, "serve", "--database-url", cfg.dbURL, "--listen", listen, "--data-dir", dataDir)
	server.Env = append(os.Environ(), "WAYBILL_LOG_FORMAT=text")
	server.Stderr = stderr
	if err := server.Start(); err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Wait() }()
	stack.push(func() {
		_ = server.Process.Signal(syscall.SIGTERM)
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			_ = server.Process.Kill()
			<-served
		}
	})
	c, err := newBenchClient(ctx, "http://"+listen, filepath.Join(dataDir, "admin.token"), cfg.clients, served)
	if err != nil {
		return nil, err
	}
	target := map[string]any{"name": "backlog", "kind": "http", "enabled": false,
		"max_concurrent": cfg.concurrency, "config": map[string]any{"url": sinkServer.URL}}
	if cfg.keys > 0 {
		target["ordering"] = map[string]any{"mode": "fifo"}
	}
	if _, err := c.post("/targets", target); err != nil {
		return nil, fmt.Errorf("create the target: %w", err)
	}
	if _, err := c.post("/routes", map[string]any{"source": "bench", "from": "*", "to": "*", "target": "backlog"}); err != nil {
		return nil, fmt.Errorf("create the route: %w", err)
	}

	r := &backlogResult{cfg: cfg, idle: -1}
	began := time.Now()
	if err := ingestAll(c, cfg.messages, cfg.clients, cfg.keys); err != nil {
		return nil, err
	}
	r.ingest = time.Since(began)

	var startPosition int64
	if err := db.QueryRow(ctx, `SELECT coalesce(max(position), 0) FROM journal`).Scan(&startPosition); err != nil {
		return nil, err
	}
	if cfg.statements {
		if err := resetStatements(ctx, db); err != nil {
			return nil, err
		}
	}
	serverBefore, _ := cpustat.ProcessTree(server.Process.Pid)
	pgBefore, pgOK := cpustat.ProcessTree(pgPID)
	selfBefore := cpustat.Self()
	hostBefore, hostOK := cpustat.HostBusy()
	target["enabled"] = true
	enabled := time.Now()
	if err := c.put("/targets/backlog", target); err != nil {
		return nil, fmt.Errorf("enable the target: %w", err)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for sink.count.Load() < int64(cfg.messages) {
		select {
		case err := <-served:
			return nil, fmt.Errorf("the server stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if rss := residentBytes(server.Process.Pid, "VmRSS"); rss > 0 {
			r.rssDuring = append(r.rssDuring, rss)
		}
		if lag, err := c.feedLag(); err == nil {
			r.feedLag = max(r.feedLag, lag)
		}
	}
	if err := c.waitSettled(ctx); err != nil {
		return nil, err
	}
	serverAfter, _ := cpustat.ProcessTree(server.Process.Pid)
	r.serverCPU = serverAfter - serverBefore
	r.selfCPU = cpustat.Self() - selfBefore
	if pgAfter, ok := cpustat.ProcessTree(pgPID); ok && pgOK {
		r.pgCPU = pgAfter - pgBefore
	}
	r.peakRSS = residentBytes(server.Process.Pid, "VmHWM")
	sink.mu.Lock()
	r.sentTwice = sink.twice
	r.drain = sink.last.Sub(enabled)
	if hostOK && sink.busyAtEnd > 0 {
		r.idle = max(0, 1-(sink.busyAtEnd-hostBefore)/(r.drain.Seconds()*float64(runtime.NumCPU())))
	}
	sink.mu.Unlock()
	if r.claimToOutcome, r.batches, err = readDrain(ctx, db, startPosition); err != nil {
		return nil, err
	}
	if cfg.statements {
		if r.statements, err = topStatements(ctx, db); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ingestAll ingests n messages through the API from the clients, with
// ordering keys taken in turn from keys of them when keys is not 0.
func ingestAll(c *benchClient, n, clients, keys int) error {
	next := make(chan int)
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		first  atomic.Value
	)
	for range clients {
		wg.Go(func() {
			for i := range next {
				m := map[string]any{"source": "bench", "from": "a", "to": "b",
					"content_type": "text/plain", "payload": fmt.Sprintf("message %d", i)}
				if keys > 0 {
					m["ordering_key"] = fmt.Sprintf("key-%d", i%keys)
				}
				_, err := c.post("/messages", m)
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d ingest calls failed, the first: %v", n, first.Load())
	}
	return nil
}

// readDrain reads, from the journal after position from, the claims and
// outcomes of the drain: the time from each claim to the outcome of its
// attempt, and each transaction's claims and outcomes, in the order the
// transactions began writing events.
func readDrain(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, from int64) (claimToOutcome []time.Duration, batches []batch, err error) {
	rows, err := db.Query(ctx, `SELECT delivery_id::text, kind, recorded_at, txid::text FROM journal
		WHERE position > $1 AND kind IN ($2, $3) ORDER BY position`,
		from, journal.KindDeliveryClaimed, journal.KindDeliveryAttempted)
	if err != nil {
		return nil, nil, err
	}
	claimed := map[string]time.Time{}
	batchOf := map[string]int{}
	var (
		id, kind, txid string
		at             time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &kind, &at, &txid}, func() error {
		i, ok := batchOf[txid]
		if !ok {
			i = len(batches)
			batchOf[txid] = i
			batches = append(batches, batch{})
		}
		if journal.Kind(kind) == journal.KindDeliveryClaimed {
			batches[i].claims++
			claimed[id] = at
			return nil
		}
		batches[i].outcomes++
		if c, ok := claimed[id]; ok {
			claimToOutcome = append(claimToOutcome, at.Sub(c))
			delete(claimed, id)
		}
		return nil
	})
	return claimToOutcome, batches, err
}

// statementsSettings are the server settings --statements adds to the
// embedded PostgreSQL.
var statementsSettings = map[string]string{"shared_preload_libraries": "pg_stat_statements",
	"pg_stat_statements.max": "1000", "pg_stat_statements.track_planning": "on"}

// resetStatements loads pg_stat_statements into db's database, if need be,
// and forgets what it counted so far.
func resetStatements(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	return nil
}

// printStatements prints what topStatements read during what.
func printStatements(w io.Writer, what string, statements []statementCost) {
	if len(statements) == 0 {
		return
	}
	fmt.Fprintf(w, "  statements by total time during %s:\n", what)
	for _, s := range statements {
		fmt.Fprintf(w, "    %9.0f ms %7.0f plan ms %8d calls %9d rows %8d reads  %s\n", s.totalMS, s.planMS, s.calls, s.rows,
			s.sharedReads, s.query)
	}
}

// topStatements reads the statements that took the most time.
func topStatements(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]statementCost, error) {
	rows, err := db.Query(ctx, `SELECT regexp_replace(query, '\s+', ' ', 'g'), calls, total_exec_time, total_plan_time, rows,
			shared_blks_read
		FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`)
	if err != nil {
		return nil, err
	}
	var out []statementCost
	var s statementCost
	_, err = pgx.ForEachRow(rows, []any{&s.query, &s.calls, &s.totalMS, &s.planMS, &s.rows, &s.sharedReads}, func() error {
		// Statements that share a long start (the lock of a batch's
		// messages, their read) differ at their end: keep both.
		if len(s.query) > 200 {
			s.query = s.query[:110] + " … " + s.query[len(s.query)-90:]
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// createDatabase creates the database on the server of url unless it exists.
func createDatabase(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	return err
}

// readPostmasterPID reads the first line of a data directory's
// postmaster.pid; 0 when it cannot.
func readPostmasterPID(dataDir string) int {
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// residentBytes reads a size field (VmRSS, VmHWM) of /proc/<pid>/status.
func residentBytes(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// put replaces the resource at path with body.
func (c *benchClient) put(path string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPut, c.base+"/api/v1"+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		answer, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, answer)
	}
	return nil
}

// feedLag is the largest waybill_feed_lag_seconds the server's metrics
// show.
func (c *benchClient) feedLag() (float64, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, errors.New(resp.Status)
	}
	lag := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "waybill_feed_lag_seconds{") {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				lag = max(lag, v)
			}
		}
	}
	return lag, sc.Err()
}
