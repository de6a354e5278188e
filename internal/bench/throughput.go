package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/cpustat"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// throughputResult is what a throughput run measured.
type throughputResult struct {
	cfg                Config
	elapsed            time.Duration
	ingest, endToEnd   []time.Duration
	deliveries, errors int
	// cpuSelf and cpuHost are the CPU seconds of this process and of the
	// whole machine (PostgreSQL included) during the run; cpuHost is 0
	// where /proc/stat is not readable.
	cpuSelf, cpuHost float64
	statements       []statementCost
}

func (r *throughputResult) print(w io.Writer) {
	mode := "commands"
	if r.cfg.HTTP {
		mode = "REST"
	}
	secs := r.elapsed.Seconds()
	fmt.Fprintf(w, "ingest through %s, %d clients, %d messages to 2 targets (%s each)", mode, r.cfg.Clients, r.cfg.Messages,
		r.cfg.limit(map[string]any{}, throughputSlots))
	if r.cfg.Rate > 0 {
		fmt.Fprintf(w, " at %.0f messages/s", r.cfg.Rate)
	}
	fmt.Fprintf(w, "\n  all delivered in %.2fs: %.0f messages/s, %.0f deliveries/s\n", secs, float64(r.cfg.Messages)/secs, float64(r.deliveries)/secs)
	fmt.Fprintf(w, "  ingest call:               p50 %s  p99 %s\n", percentile(r.ingest, 50), percentile(r.ingest, 99))
	fmt.Fprintf(w, "  ingest to last delivered:  p50 %s  p99 %s\n", percentile(r.endToEnd, 50), percentile(r.endToEnd, 99))
	if r.cpuHost > 0 {
		perMessage := 1000 / float64(r.cfg.Messages)
		fmt.Fprintf(w, "  CPU per message:           %.2f ms on the machine, %.2f ms in this process\n",
			r.cpuHost*perMessage, r.cpuSelf*perMessage)
	}
	if r.errors > 0 {
		fmt.Fprintf(w, "  %d ingest calls failed\n", r.errors)
	}
	printStatements(w, "the run", r.statements)
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

// throughput runs the throughput benchmark: a server in this process, two
// http targets served by a local sink, cfg.Messages ingested to both from
// cfg.Clients clients, measured until every message is delivered.
func throughput(ctx context.Context, cfg Config, log *slog.Logger) (*throughputResult, error) {
	dir, err := os.MkdirTemp("", "waybill-bench-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// As root the embedded PostgreSQL runs as the postgres user.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.DatabaseURL == "" {
		var settings map[string]string
		if cfg.Statements {
			settings = statementsSettings
		}
		url, stop, err := startPostgres(ctx, dir, settings, log)
		if err != nil {
			return nil, err
		}
		defer stop()
		cfg.DatabaseURL = url
	}
	// Through REST the server runs its own NATS in process, as `waybill
	// serve` does by default; the bench's Writer needs one it can reach too.
	var ns *natsserver.Server
	natsURL := ""
	if !cfg.HTTP {
		ns = natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
		if err := ns.Start(ctx); err != nil {
			return nil, err
		}
		defer ns.Stop(context.Background())
		natsURL = ns.ClientURL()
	}
	sink := &sinkRecord{arrived: map[string][]time.Time{}, all: make(chan struct{}), want: 2 * cfg.Messages}
	sinkServer := httptest.NewServer(sink)
	defer sinkServer.Close()

	listen, err := freeListenAddr()
	if err != nil {
		return nil, err
	}
	sc := ServerConfig{DataDir: filepath.Join(dir, "var"), DatabaseURL: cfg.DatabaseURL, NATSURL: natsURL, Listen: listen}
	serveCtx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- cfg.Serve(serveCtx, sc) }()
	defer func() {
		stopServe()
		<-served
	}()
	c, err := newClient(ctx, "http://"+listen, filepath.Join(sc.DataDir, "admin.token"), cfg.Clients, served)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"sink-a", "sink-b"} {
		target := map[string]any{"name": name, "kind": "http", "enabled": true, "config": map[string]any{"url": sinkServer.URL}}
		cfg.limit(target, throughputSlots)
		if cfg.Signing != "" {
			target["signing"] = map[string]any{"scheme": cfg.Signing}
		}
		if _, err := c.post("/targets", target); err != nil {
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
	db, err := cfg.OpenDB(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if !cfg.HTTP {
		nc, err := ns.Connect()
		if err != nil {
			return nil, err
		}
		defer nc.Close()
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

	r := &throughputResult{cfg: cfg}
	var (
		mu sync.Mutex
		// sent is when each message's ingest call began: its deliveries
		// may reach the sink before the call returns.
		sent = map[string]time.Time{}
		next = make(chan int)
		wg   sync.WaitGroup
	)
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.Statements {
		if err := resetStatements(ctx, db); err != nil {
			return nil, err
		}
	}
	began, selfBefore := time.Now(), cpustat.Self()
	hostBefore, hostOK := cpustat.HostBusy()
	for range cfg.Clients {
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
	for i := range cfg.Messages {
		if cfg.Rate > 0 {
			if wait := time.Until(began.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait)
			}
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if r.errors > 0 {
		return nil, fmt.Errorf("%d of %d ingest calls failed", r.errors, cfg.Messages)
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
	if cfg.Statements {
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
