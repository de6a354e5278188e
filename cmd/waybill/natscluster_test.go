package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testlog"
	"github.com/waybill/waybill/internal/testpoll"
)

// natsNode is one nats-server process of a test's cluster.
type natsNode struct {
	cmd     *exec.Cmd
	client  string // nats://host:port
	monitor string // http://host:port
}

// startNATSCluster builds nats-server and starts n nodes on loopback, each
// routing to the others, and waits until every node sees every other.
func startNATSCluster(t *testing.T, n int) []*natsNode {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	addrs := freeAddrs(t, 3*n)
	routes := make([]string, n)
	for i := range routes {
		routes[i] = "nats://" + addrs[i]
	}
	nodes := make([]*natsNode, n)
	for i := range nodes {
		client, monitor := addrs[n+2*i], addrs[n+2*i+1]
		host, port, _ := strings.Cut(client, ":")
		_, mport, _ := strings.Cut(monitor, ":")
		cmd := exec.Command(bin, "-a", host, "-p", port, "-m", mport, "--cluster_name", "waybill-test",
			"--cluster", routes[i], "--routes", strings.Join(routes, ","))
		var logs testlog.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				t.Logf("log of nats node %s:\n%s", client, logs.String())
			}
		})
		nodes[i] = &natsNode{cmd: cmd, client: "nats://" + client, monitor: "http://" + monitor}
	}
	for _, node := range nodes {
		testpoll.Until(t, "nats node "+node.client+" routes to the others", func() bool {
			var routez struct {
				NumRoutes int `json:"num_routes"`
			}
			return node.get("/routez", &routez) == nil && routez.NumRoutes >= n-1
		})
	}
	return nodes
}

// get decodes the node's monitoring page at path into out.
func (n *natsNode) get(path string, out any) error {
	resp, err := http.Get(n.monitor + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// connections counts the clients connected to the node.
func (n *natsNode) connections(t *testing.T) int {
	t.Helper()
	var connz struct {
		NumConnections int `json:"num_connections"`
	}
	if err := n.get("/connz", &connz); err != nil {
		t.Fatal(err)
	}
	return connz.NumConnections
}

// TestNATSNodeKilledLosesNothing runs two servers on one PostgreSQL and a
// three-node NATS cluster, given every node's URL. Under a steady ingest
// the node that holds the most of their connections is killed with
// SIGKILL: the servers reconnect to the others without a restart, no
// message is lost, and none waits for its delivery longer than a sweep
// pass (the lost wake-ups are the sweep's to make up).
func TestNATSNodeKilledLosesNothing(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db := dbtest.Pool(t)
	nodes := startNATSCluster(t, 3)
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.client
	}

	var (
		mu       sync.Mutex
		received = map[string]time.Time{} // idempotency key → first receipt
	)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		if _, ok := received[r.Header.Get("Idempotency-Key")]; !ok {
			received[r.Header.Get("Idempotency-Key")] = time.Now()
		}
		mu.Unlock()
	}))
	defer sink.Close()

	dir := t.TempDir()
	var servers []*server
	for i := range 2 {
		servers = append(servers, startServer(t, bin, "--database-url", db.Config().ConnString(),
			"--nats-url", strings.Join(urls, ","), "--data-dir", filepath.Join(dir, fmt.Sprint(i))))
	}
	admin := servers[0].adminClient(t, filepath.Join(dir, "0"))
	admin.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "enabled": true,
		"config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
	admin.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": "sink"}, http.StatusCreated, nil)

	var (
		ackMu sync.Mutex
		acked = map[string]string{}    // delivery id → message id
		sent  = map[string]time.Time{} // delivery id → when its ingest was sent
		done  atomic.Bool
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for n := 0; !done.Load(); n++ {
			body, _ := json.Marshal(map[string]any{"source": "erp", "from": "a", "to": "b", "payload": fmt.Sprint(n)})
			req, _ := http.NewRequest("POST", "http://"+servers[n%2].addr+"/api/v1/messages", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+admin.token)
			req.Header.Set("Content-Type", "application/json")
			at := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("ingest %d: %v", n, err)
				return
			}
			var m struct {
				ID         string
				Deliveries []struct{ ID string }
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &m) != nil || len(m.Deliveries) != 1 {
				t.Errorf("ingest %d: %d %s", n, resp.StatusCode, data)
				return
			}
			ackMu.Lock()
			acked[m.Deliveries[0].ID] = m.ID
			sent[m.Deliveries[0].ID] = at
			ackMu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
	count := func() int {
		ackMu.Lock()
		defer ackMu.Unlock()
		return len(acked)
	}
	testpoll.Until(t, "ingest under way", func() bool { return count() >= 100 })
	victim := nodes[0]
	for _, n := range nodes[1:] {
		if n.connections(t) > victim.connections(t) {
			victim = n
		}
	}
	if victim.connections(t) == 0 {
		t.Fatal("no node holds a connection of the servers")
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	killed := count()
	testpoll.Until(t, "both servers connected to the nodes left", func() bool {
		var conns int
		for _, n := range nodes {
			if n != victim {
				conns += n.connections(t)
			}
		}
		return conns == len(servers)
	})
	testpoll.Until(t, "ingest under way after the kill", func() bool { return count() >= killed+200 })
	done.Store(true)
	wg.Wait()
	if t.Failed() {
		return
	}

	waitEveryMessageDelivered(t, db)
	// The deliveries' Idempotency-Key is the delivery's id.
	mu.Lock()
	defer mu.Unlock()
	var slowest time.Duration
	for id, at := range sent {
		got, ok := received[id]
		if !ok {
			t.Fatalf("delivery %s of message %s never reached the receiver", id, acked[id])
		}
		slowest = max(slowest, got.Sub(at))
	}
	t.Logf("%d messages, the slowest delivered %v after its ingest", len(sent), slowest)
	// A sweep pass is 5 s; a second of slack for the machine.
	if slowest > 6*time.Second {
		t.Errorf("a delivery took %v from its ingest, more than a sweep pass", slowest)
	}
	dbtest.Audit(t, db)
}
