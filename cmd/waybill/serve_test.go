package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	natsd "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testlog"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/workers"
)

// binaryDir is where buildBinary puts the waybill command; TestMain makes
// it and removes it after the tests.
var binaryDir string

// built builds the waybill command on its first call, so that the tests
// that run it share one build rather than link it each.
var built = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binaryDir, "waybill")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build waybill: %w\n%s", err, out)
	}
	return bin, nil
})

// buildBinary returns the path of the waybill command, built once for all
// the tests that run it.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin, err := built()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// server is one `waybill serve` process of a test.
type server struct {
	cmd  *exec.Cmd
	addr string
	logs testlog.Buffer
}

// startServer starts `waybill serve` with args and waits until it is
// ready.
func startServer(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	return startServerEnv(t, bin, nil, args...)
}

// startServerEnv starts a server with env (NAME=value) added to the
// test's environment, over it, and waits until it is ready.
func startServerEnv(t *testing.T, bin string, env []string, args ...string) *server {
	t.Helper()
	s := launchServer(t, bin, env, args...)
	waitReady(t, "http://"+s.addr+"/readyz")
	return s
}

// launchServer starts `waybill serve` with args on a free loopback
// address, with env added to the test's environment, and kills it at the
// end of the test if it still runs; it does not wait for it to be ready.
func launchServer(t *testing.T, bin string, env []string, args ...string) *server {
	t.Helper()
	s := &server{addr: freeAddr(t)}
	s.cmd = exec.Command(bin, append([]string{"serve", "--listen", s.addr, "--log-format", "json"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.logs, &s.logs
	// The key the tests' Writers seal with, unless args give another.
	s.cmd.Env = append(append(os.Environ(), "WAYBILL_SECRETS_KEY_FILE="+dbtest.SecretsKeyFile(t)), env...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("log of the server on %s:\n%s", s.addr, s.logs.String())
		}
	})
	return s
}

// client is a client of the server's REST API that sends token.
func (s *server) client(t *testing.T, token string) *api {
	return &api{t: t, base: "http://" + s.addr + "/api/v1", token: token}
}

// adminClient is a client of the server's REST API with the admin token
// that serve wrote to the data directory dataDir.
func (s *server) adminClient(t *testing.T, dataDir string) *api {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return s.client(t, strings.TrimSpace(string(token)))
}

// shared gives what a test and the server processes it starts share: a
// fresh database with the schema, its URL, and a NATS server on loopback.
func shared(t *testing.T) (*pgxpool.Pool, string, *natsserver.Server) {
	t.Helper()
	db := dbtest.Pool(t)
	ns := natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
	t.Cleanup(func() { ns.Stop(context.Background()) })
	if err := ns.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db, db.Config().ConnString(), ns
}

// TestServeStopsGently runs `waybill serve` on a test database and an
// outside NATS server, lets it deliver, then sends SIGTERM while an attempt
// hangs: the process stops claiming, gives the attempt its drain grace,
// releases it as a retry due now, and exits 0. Nothing is failed.
func TestServeStopsGently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, dbURL, ns := shared(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), DB: db, Notifier: workers.NewPublisher(nc, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}

	hang := make(chan struct{})
	entered := make(chan struct{}, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) == "hang" {
			entered <- struct{}{}
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
	}))
	defer sink.Close()
	defer close(hang)
	cfg, _ := json.Marshal(map[string]string{"url": sink.URL})
	if _, err := w.CreateTarget(ctx, lifecycle.Target{Name: "web", Kind: "http", Enabled: true, Config: cfg}, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateRoute(ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "web"}, "operator:admin"); err != nil {
		t.Fatal(err)
	}

	srv := startServer(t, buildBinary(t), "--database-url", dbURL, "--nats-url", ns.ClientURL(),
		"--drain-grace", "200ms", "--data-dir", t.TempDir())
	cmd := srv.cmd

	ingest := func(payload string) *projection.Message {
		m, _, err := w.Ingest(ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", ContentType: "text/plain", Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ok := ingest("fine")
	waitStatus(t, db, ok.ID, lifecycle.StatusDelivered)

	// The console is served beside the API, and / leads to it.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/": http.StatusSeeOther, "/ui/signin": http.StatusOK, "/ui/": http.StatusSeeOther} {
		resp, err := noRedirect.Get("http://" + srv.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}

	slow := ingest("hang")
	<-entered
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v, want 0", err)
	}
	m, err := projection.Load(ctx, db, slow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Deliveries[0]; d.State != lifecycle.StateRetrying {
		t.Fatalf("the hanging attempt is %s after the stop, want retrying", d.State)
	}
	events, err := journal.Stream(ctx, db, journal.MessageStream(slow.ID))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := events[len(events)-1].Payload.(*journal.DeliveryReleased); !ok || !r.Started {
		t.Fatalf("last event %s, want delivery.released (started)", events[len(events)-1].Kind())
	}
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	testpoll.Until(t, url+" answers 200", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func waitStatus(t *testing.T, db *pgxpool.Pool, id uuid.UUID, want lifecycle.MessageStatus) {
	t.Helper()
	testpoll.Until(t, fmt.Sprintf("message %v %s", id, want), func() bool {
		var status string
		if err := db.QueryRow(context.Background(), `SELECT status FROM messages WHERE id = $1`, id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		return status == string(want)
	})
}

// TestServeEnvironment: a variable sets its flag when the flag is not given,
// the flag wins over it, and a value the flag refuses stops serve before
// anything starts, naming the variable.
func TestServeEnvironment(t *testing.T) {
	t.Setenv("WAYBILL_DRAIN_GRACE", "7s")
	t.Setenv("WAYBILL_LISTEN", "127.0.0.1:1")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg := serveFlags(fs)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err != nil {
		t.Fatal(err)
	}
	if cfg.drainGrace != 7*time.Second || cfg.listen != "127.0.0.1:2" {
		t.Errorf("drain grace %s, listen %s; want 7s from the variable and 127.0.0.1:2 from the flag", cfg.drainGrace, cfg.listen)
	}

	t.Setenv("WAYBILL_MAX_PAYLOAD", "ten megabytes")
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"serve"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "WAYBILL_MAX_PAYLOAD") {
		t.Errorf("exit %d, %q; want 2 naming WAYBILL_MAX_PAYLOAD", code, stderr.String())
	}
}

// TestServeRefusesAnotherSecretsKey: a second server on a database whose
// secrets were sealed with another key refuses to start, naming the flag;
// with the same key it starts.
func TestServeRefusesAnotherSecretsKey(t *testing.T) {
	t.Parallel()
	_, dbURL, ns := shared(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", filepath.Join(dir, "var0"))

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--listen", freeAddr(t), "--database-url", dbURL,
		"--nats-url", ns.ClientURL(), "--data-dir", filepath.Join(dir, "var1"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--secrets-key-file") {
		t.Fatalf("a server with another secrets key: %v, %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "var1", "secrets.key")); err != nil {
		t.Fatalf("the data directory's own key was not made: %v", err)
	}
	startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", filepath.Join(dir, "var2"),
		"--secrets-key-file", dbtest.SecretsKeyFile(t))
}

// TestServeTurnsUnreadyBeforeItStops sends SIGTERM to a server with a
// shutdown delay: /readyz answers 503 with Retry-After at once, while the
// rest still answers, on connections it does not keep; the server exits 0
// after the delay.
func TestServeTurnsUnreadyBeforeItStops(t *testing.T) {
	t.Parallel()
	_, dbURL, ns := shared(t)
	srv := startServer(t, buildBinary(t), "--database-url", dbURL, "--nats-url", ns.ClientURL(),
		"--data-dir", t.TempDir(), "--shutdown-delay", "3s")
	base := "http://" + srv.addr
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (*http.Response, error) {
		resp, err := http.Get(base + path)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	testpoll.Until(t, "/readyz answers 503", func() bool {
		resp, err := get("/readyz")
		if err != nil {
			t.Fatalf("/readyz refused before the shutdown delay ended: %v", err)
		}
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	resp, _ := get("/readyz")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("the unready answer has no Retry-After")
	}
	for _, path := range []string{"/healthz", "/ui/signin"} {
		resp, err := get(path)
		if err != nil {
			t.Fatalf("GET %s while unready: %v", path, err)
		}
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Errorf("GET %s while unready: %d, close %v; want 200 on a connection not kept", path, resp.StatusCode, resp.Close)
		}
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v, want 0", err)
	}
	if _, err := get("/healthz"); err == nil {
		t.Error("the server still answers after it exited")
	}
}

// TestServeRefusesATinyNATSPayload: a NATS server whose max_payload could
// not hold even an event's envelope is refused at start, naming it,
// rather than stalling the event stream at the first event.
func TestServeRefusesATinyNATSPayload(t *testing.T) {
	t.Parallel()
	srv, err := natsd.NewServer(&natsd.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 1024})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	var l service.List
	defer l.Stop(context.Background())
	_, err = connectNATS(t.Context(), srv.ClientURL(), slog.New(slog.DiscardHandler), &l)
	if err == nil || !strings.Contains(err.Error(), "max_payload is 1024 bytes") {
		t.Fatalf("connect: %v", err)
	}
}
