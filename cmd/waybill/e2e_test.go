package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/internal/testpoll"
)

// api is a client of a running server's REST API in a test.
type api struct {
	t     *testing.T
	base  string
	token string
}

// call sends a JSON request and decodes the answer into out when it is
// not nil; it fails the test unless the status is want.
func (a *api) call(method, path string, body any, want int, out any) {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// TestEndToEnd starts the real binary with its embedded defaults (its own
// PostgreSQL in a data directory, NATS in the process), configures a
// target that posts to a local sink and a route over REST, ingests
// messages, follows them to delivered, reads their history, stops the
// server and audits the journal with `waybill audit --data-dir`.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir, err := os.MkdirTemp("", "waybill-e2e-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As root the embedded PostgreSQL runs as the postgres user, which
	// must reach the data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "var")

	var (
		mu  sync.Mutex
		got = map[string]string{}
	)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Header.Get("Waybill-Message-Id")] = string(body)
		mu.Unlock()
	}))
	defer sink.Close()
	var outcomes atomic.Int32
	callbacks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Status string }
		if json.NewDecoder(r.Body).Decode(&body) == nil && body.Status == "delivered" {
			outcomes.Add(1)
		}
	}))
	defer callbacks.Close()

	srv := startServer(t, bin, "--data-dir", dataDir)
	cmd, addr := srv.cmd, srv.addr
	if info, err := os.Stat(filepath.Join(dataDir, "admin.token")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("admin.token: %v, %v; want mode 0600", info.Mode(), err)
	}
	a := srv.adminClient(t, dataDir)

	a.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http",
		"config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	a.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)
	// The callbacks' receiver is on loopback, which callbacks reach only
	// when the settings allow it.
	a.call("PUT", "/settings", map[string]any{"callbacks": map[string]any{"allowed_networks": []string{"127.0.0.0/8", "::1/128"}}},
		http.StatusOK, nil)

	type delivery struct {
		ID, Target, State string
	}
	type message struct {
		ID, Status string
		Deliveries []delivery
	}
	var ids []string
	for i := range 10 {
		var m message
		a.call("POST", "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex",
			"payload": fmt.Sprintf("order %d", i), "content_type": "text/plain", "callback_url": callbacks.URL}, http.StatusCreated, &m)
		ids = append(ids, m.ID)
	}
	for _, id := range ids {
		testpoll.Until(t, "message "+id+" delivered", func() bool {
			var m message
			a.call("GET", "/messages/"+id, nil, http.StatusOK, &m)
			if m.Status == "delivered" && (len(m.Deliveries) != 1 || m.Deliveries[0].State != "delivered") {
				t.Fatalf("message %s delivered with deliveries %+v", id, m.Deliveries)
			}
			return m.Status == "delivered"
		})
	}
	mu.Lock()
	if len(got) != 10 || got[ids[3]] != "order 3" {
		t.Errorf("the sink got %d messages, the fourth %q", len(got), got[ids[3]])
	}
	mu.Unlock()

	testpoll.Until(t, "10 outcome callbacks", func() bool { return outcomes.Load() >= 10 })

	// A file dropped in a directory source is delivered too.
	spool := filepath.Join(dir, "spool")
	a.call("POST", "/sources", map[string]any{"name": "drop", "kind": "directory", "config": map[string]any{
		"dir": spool, "from": "acme", "to": "globex", "interval": "20ms", "settle": "20ms"}}, http.StatusCreated, nil)
	a.call("POST", "/routes", map[string]any{"source": "drop", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, "order.txt"), []byte("from a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the dropped file delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 11
	})

	var history struct {
		Items []struct {
			Kind string
		}
	}
	a.call("GET", "/messages/"+ids[0]+"/history", nil, http.StatusOK, &history)
	var kinds []string
	for _, e := range history.Items {
		kinds = append(kinds, e.Kind)
	}
	want := "message.accepted message.dispatched delivery.claimed delivery.attempted message.callback_claimed message.callback_attempted"
	if strings.Join(kinds, " ") != want {
		t.Errorf("history %v, want %s", kinds, want)
	}

	// The operator's command line, against the same server.
	cli := func(args ...string) string {
		t.Helper()
		args = append(args, "--server", "http://"+addr, "--token", a.token)
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("waybill %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := cli("messages", "--status", "delivered"); strings.Count(out, "delivered") < 10 {
		t.Errorf("waybill messages lists fewer than 10 delivered:\n%s", out)
	}
	if out := cli("messages", "show", ids[0]); !strings.Contains(out, "delivery.attempted") || !strings.Contains(out, "sink") {
		t.Errorf("waybill messages show lacks the history or the target:\n%s", out)
	}
	var m message
	a.call("GET", "/messages/"+ids[0], nil, http.StatusOK, &m)
	if out := cli("redeliver", ids[0], m.Deliveries[0].ID); !strings.Contains(out, ids[0]) {
		t.Errorf("waybill redeliver:\n%s", out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v", err)
	}
	out, err := exec.Command(bin, "audit", "--data-dir", dataDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0 violations") {
		t.Fatalf("audit: %v\n%s", err, out)
	}
}

// TestOperatorCommandsBesideServer runs the operator's commands on the data
// directory of a running server with the embedded defaults: audit and the
// token commands work on its database, and the server keeps it; rebuild
// and reset refuse and say how to stop the server.
func TestOperatorCommandsBesideServer(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir, err := os.MkdirTemp("", "waybill-e2e-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As root the embedded PostgreSQL runs as the postgres user, which
	// must reach the data directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "var")
	srv := startServer(t, bin, "--data-dir", dataDir)
	urlFile := filepath.Join(dataDir, "database.url")
	if info, err := os.Stat(urlFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, %v; want mode 0600", urlFile, info, err)
	}

	waybill := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--data-dir", dataDir)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != wantCode {
			t.Fatalf("waybill %s: exit %d (%v), want %d\n%s%s", strings.Join(args, " "), code, err, wantCode, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	if out := waybill(0, "audit"); !strings.Contains(out, "0 violations") {
		t.Errorf("audit beside the server:\n%s", out)
	}
	token := strings.TrimSpace(strings.SplitN(waybill(0, "token", "create", "--name", "partner", "--role", "receipt"), "\n", 2)[0])
	if out := waybill(0, "token", "list"); !strings.Contains(out, "partner") || !strings.Contains(out, "admin") {
		t.Errorf("token list beside the server:\n%s", out)
	}
	// The server knows the new token at once: its database is the one
	// the command wrote to. The receipt role may post a receipt, so an
	// unknown delivery is 404, not 401 or 403.
	receiver := srv.client(t, token)
	receiver.call("POST", "/deliveries/"+uuid.NewString()+"/receipt", map[string]any{"outcome": "positive"}, http.StatusNotFound, nil)

	for _, args := range [][]string{{"rebuild"}, {"reset", "--projections"}} {
		out := waybill(1, args...)
		for _, want := range []string{"a Waybill server is running on this database", "Ctrl-C", "SIGTERM"} {
			if !strings.Contains(out, want) {
				t.Errorf("waybill %s beside the server says %q, lacking %q", strings.Join(args, " "), out, want)
			}
		}
	}
	// Nothing the commands did stopped the server's database.
	waitReady(t, "http://"+srv.addr+"/readyz")
	receiver.call("POST", "/deliveries/"+uuid.NewString()+"/receipt", map[string]any{"outcome": "positive"}, http.StatusNotFound, nil)

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v", err)
	}
	if _, err := os.Stat(urlFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after the stop: %v, want it removed", urlFile, err)
	}
	// With the server stopped, rebuild runs on the embedded database.
	if out := waybill(0, "rebuild"); !strings.Contains(out, "0 violations") {
		t.Errorf("rebuild after the stop:\n%s", out)
	}
}
