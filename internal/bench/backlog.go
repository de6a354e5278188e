package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/pgserver"
)

// backlogResult is what a backlog run measured.
type backlogResult struct {
	cfg Config
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
	// writes is what the ingest and the drain wrote in the projections.
	writes *projectionWrites
	// batches are the drain's transactions in the order they began writing
	// events, with the claims and outcomes each recorded.
	batches []batch
	// claims are the times the drain's claims were recorded, in the
	// journal's order.
	claims []time.Time
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

// rateAfterBurst measures what a target's bucket let through, from the
// times its claims were recorded at: the bucket, full at the start, lets
// burst claims go at once and the rest at its rate, so the claims past
// the burst over the time from the first claim to the last are that rate.
// quietest and busiest are the fewest and most claims in a whole second
// after the first one, counted from the first claim; both 0 when the
// claims span fewer than three seconds.
func rateAfterBurst(at []time.Time, burst int) (rate float64, quietest, busiest int) {
	if len(at) <= burst {
		return 0, 0, 0
	}
	at = slices.SortedFunc(slices.Values(at), time.Time.Compare)
	span := at[len(at)-1].Sub(at[0])
	if span > 0 {
		rate = float64(len(at)-burst) / span.Seconds()
	}
	whole := int(span / time.Second)
	if whole < 3 {
		return rate, 0, 0
	}
	perSecond := make([]int, whole)
	for _, t := range at {
		if k := int(t.Sub(at[0]) / time.Second); k < whole {
			perSecond[k]++
		}
	}
	return rate, slices.Min(perSecond[1:]), slices.Max(perSecond[1:])
}

func (r *backlogResult) print(w io.Writer) {
	n := float64(r.cfg.Backlog)
	order := "unordered"
	if r.cfg.Keys > 0 {
		order = fmt.Sprintf("fifo over %d ordering keys", r.cfg.Keys)
	}
	signing := r.cfg.Signing
	if signing == "" {
		signing = "hmac-sha256"
	}
	transform := "no transform"
	if r.cfg.Transform != "" {
		transform = "transform " + r.cfg.Transform
	}
	limits := r.cfg.limit(map[string]any{}, drainSlots)
	if r.cfg.TargetRate > 0 {
		limits += fmt.Sprintf(", rate %g/s", r.cfg.TargetRate)
	}
	fmt.Fprintf(w, "backlog of %d deliveries to one http target (%s, %s, signing %s, %s), ingested through REST by %d clients with the target disabled\n",
		r.cfg.Backlog, limits, order, signing, transform, r.cfg.Clients)
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
	if r.cfg.TargetRate > 0 {
		burst := lifecycle.Rate{PerSecond: r.cfg.TargetRate}.WithDefaults().Burst
		rate, quietest, busiest := rateAfterBurst(r.claims, burst)
		fmt.Fprintf(w, "  claims past the burst of %d: %.1f/s (%.1f %% of the rate); by whole second after the first: %d to %d\n",
			burst, rate, 100*rate/r.cfg.TargetRate, quietest, busiest)
	}
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
	r.writes.print(w, n)
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
// its CPU and memory are its own), on the bench's own PostgreSQL with
// fsync on or on cfg.DatabaseURL, one http target disabled while the
// backlog is ingested, then enabled. The server's logs go to stderr.
func backlog(ctx context.Context, cfg Config, log *slog.Logger, stderr io.Writer) (*backlogResult, error) {
	dir, err := os.MkdirTemp("", "waybill-backlog-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	walDir := ""
	if cfg.DatabaseURL == "" {
		// The log is kept from the start of the run for its count of
		// index entries.
		settings := map[string]string{"max_connections": "200", "wal_keep_size": "4GB"}
		if cfg.Statements {
			maps.Copy(settings, statementsSettings)
		}
		url, stop, err := startPostgres(ctx, dir, settings, log)
		if err != nil {
			return nil, err
		}
		defer stop()
		cfg.DatabaseURL = url
		walDir = filepath.Join(dir, "pg", "pg_wal")
	}
	db, err := cfg.OpenDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	// The server's CPU is measured when it runs on this machine and its
	// data directory is readable.
	pgPID := pgserver.LocalPID(ctx, db)

	sink := &countingSink{seen: make(map[string]bool, cfg.Backlog), want: int64(cfg.Backlog)}
	sinkServer := httptest.NewServer(sink)
	defer sinkServer.Close()

	listen, err := freeListenAddr()
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "var")
	server, err := cfg.ServeCommand(ServerConfig{DataDir: dataDir, DatabaseURL: cfg.DatabaseURL, Listen: listen})
	if err != nil {
		return nil, err
	}
	server.Stderr = stderr
	if err := server.Start(); err != nil {
		return nil, fmt.Errorf("start the server: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Wait() }()
	stopServer := sync.OnceFunc(func() {
		_ = server.Process.Signal(syscall.SIGTERM)
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			_ = server.Process.Kill()
			<-served
		}
	})
	defer stopServer()
	c, err := newClient(ctx, "http://"+listen, filepath.Join(dataDir, "admin.token"), cfg.Clients, served)
	if err != nil {
		return nil, err
	}
	target := map[string]any{"name": "backlog", "kind": "http", "enabled": false, "config": map[string]any{"url": sinkServer.URL}}
	cfg.limit(target, drainSlots)
	if cfg.TargetRate > 0 {
		target["rate"] = map[string]any{"per_second": cfg.TargetRate}
	}
	if cfg.Keys > 0 {
		target["ordering"] = map[string]any{"mode": "fifo"}
	}
	if cfg.Signing != "" {
		target["signing"] = map[string]any{"scheme": cfg.Signing}
	}
	if cfg.Transform != "" {
		target["transform"] = cfg.Transform
	}
	if _, err := c.post("/targets", target); err != nil {
		return nil, fmt.Errorf("create the target: %w", err)
	}
	if _, err := c.post("/routes", map[string]any{"source": "bench", "from": "*", "to": "*", "target": "backlog"}); err != nil {
		return nil, fmt.Errorf("create the route: %w", err)
	}

	r := &backlogResult{cfg: cfg, idle: -1}
	writesFrom, err := markWrites(ctx, db)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := ingestAll(c, cfg.Backlog, cfg.Clients, cfg.Keys); err != nil {
		return nil, err
	}
	r.ingest = time.Since(began)

	startPosition, err := journal.LastPosition(ctx, db)
	if err != nil {
		return nil, err
	}
	if cfg.Statements {
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
	for sink.count.Load() < int64(cfg.Backlog) {
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
	if r.claimToOutcome, r.batches, r.claims, err = readDrain(ctx, db, startPosition); err != nil {
		return nil, err
	}
	if cfg.Statements {
		if r.statements, err = topStatements(ctx, db); err != nil {
			return nil, err
		}
	}
	stopServer()
	if r.writes, err = writesSince(ctx, db, writesFrom, walDir); err != nil {
		return nil, err
	}
	return r, nil
}

// ingestAll ingests n messages through the API from the clients, with
// ordering keys taken in turn from keys of them when keys is not 0.
func ingestAll(c *client, n, clients, keys int) error {
	next := make(chan int)
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		first  atomic.Value
	)
	for range clients {
		wg.Go(func() {
			for i := range next {
				m := map[string]any{"source": "bench", "from": "a", "to": "b", "content_type": "application/json",
					"payload": fmt.Sprintf(`{"id": "message-%d", "amount": %d.5, "customer": "c-%d"}`, i, i%10000, i%100)}
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
// attempt, each transaction's claims and outcomes, in the order the
// transactions began writing events, and the times of the claims.
func readDrain(ctx context.Context, q journal.Querier, from int64) (claimToOutcome []time.Duration, batches []batch, claims []time.Time, err error) {
	events, marks, err := journal.ReadKinds(ctx, q, from, journal.KindDeliveryClaimed, journal.KindDeliveryAttempted)
	if err != nil {
		return nil, nil, nil, err
	}
	claimed := map[uuid.UUID]time.Time{}
	batchOf := map[uint64]int{}
	for i, e := range events {
		b, ok := batchOf[marks[i].TxID]
		if !ok {
			b = len(batches)
			batchOf[marks[i].TxID] = b
			batches = append(batches, batch{})
		}
		if e.Kind() == journal.KindDeliveryClaimed {
			batches[b].claims++
			claimed[e.DeliveryID] = e.RecordedAt
			claims = append(claims, e.RecordedAt)
			continue
		}
		batches[b].outcomes++
		if c, ok := claimed[e.DeliveryID]; ok {
			claimToOutcome = append(claimToOutcome, e.RecordedAt.Sub(c))
			delete(claimed, e.DeliveryID)
		}
	}
	return claimToOutcome, batches, claims, nil
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
