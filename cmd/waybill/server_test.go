package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/waybill/waybill/internal/securefile"
	"github.com/waybill/waybill/internal/testpoll"
)

// TestEveryLoopInOneServer runs two `waybill serve` processes on one
// database and one NATS, with every background loop on, and checks that
// each loop does its work beside the others: the workers deliver, a
// callback is made, a directory source takes a file in, an alert goes to
// the webhook (each signed: the callback and the alert with the keys the
// two servers made, one each, as they started together), a bulk operation redelivers what failed, the sweep passes,
// and retention expunges payloads, then archives and removes the settled
// messages, and a receiver that answers 410 Gone has its target disabled.
// A bulk dry run counts what the run then does; an unknown message's resend
// and replay are 404 however often they come, and ingest goes on; a retry
// fires on time, woken by the process that scheduled it, not by the sweep.
// Each lease is held by exactly one of the two processes. A
// partner's scoped ingest token, made over REST, posts to its source and
// is refused elsewhere. The audit finds the journal, the projections and
// the archive in agreement.
func TestEveryLoopInOneServer(t *testing.T) {
	t.Parallel()
	_, dbURL, ns := shared(t)
	bin := buildBinary(t)
	dir := t.TempDir()

	var (
		mu        sync.Mutex
		delivered = map[string]int{}
		refuse    atomic.Bool
		// signed is what the sink was sent by body: the content the
		// signature covers, and the signature.
		signed = map[string][2]string{}
		// flaky is when the receiver at /flaky was called, each time; it
		// answers 503 twice, then 200.
		flaky []time.Time
	)
	refuse.Store(true)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/flaky" {
			mu.Lock()
			flaky = append(flaky, time.Now())
			n := len(flaky)
			mu.Unlock()
			if n <= 2 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
			}
			return
		}
		if r.URL.Path == "/gone" {
			http.Error(w, "no such hook", http.StatusGone)
			return
		}
		if string(body) == "refused until fixed" && refuse.Load() {
			http.Error(w, "not yet", http.StatusBadRequest)
			return
		}
		mu.Lock()
		delivered[string(body)]++
		signed[string(body)] = [2]string{r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "." + string(body),
			r.Header.Get("webhook-signature")}
		mu.Unlock()
	}))
	defer sink.Close()
	var callbacks, alerts, disabledAlerts atomic.Int32
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Status, Code string }
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &body)
		mu.Lock()
		signed[r.URL.Path] = [2]string{r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "." + string(data),
			r.Header.Get("webhook-signature")}
		mu.Unlock()
		switch {
		case r.URL.Path == "/callback" && body.Status == "delivered":
			callbacks.Add(1)
		case r.URL.Path == "/alert" && body.Code == "message_not_routed":
			alerts.Add(1)
		case r.URL.Path == "/alert" && body.Code == "target_disabled":
			disabledAlerts.Add(1)
		}
	}))
	defer hooks.Close()

	// Both servers seal with one key, as every server on one database must.
	secretsKey := filepath.Join(dir, "secrets.key")
	if err := securefile.Write(secretsKey, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32)))); err != nil {
		t.Fatal(err)
	}
	servers := make([]*server, 2)
	for i := range servers {
		servers[i] = startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(),
			"--data-dir", filepath.Join(dir, "var"+strconv.Itoa(i)), "--alert-webhook", hooks.URL+"/alert",
			"--secrets-key-file", secretsKey)
	}
	a := servers[0].adminClient(t, filepath.Join(dir, "var0"))
	b := servers[1].client(t, a.token)

	// sink takes 8 attempts at once in each process, and no bound across
	// the cluster.
	a.call("POST", "/targets", map[string]any{"name": "sink", "kind": "http", "slots": 8, "config": map[string]any{"url": sink.URL}},
		http.StatusCreated, nil)
	// erp's route lets through all but test traffic, by a filter.
	for source, filter := range map[string]string{"erp": `!("x-test" in message.headers)`, "drop": ""} {
		a.call("POST", "/routes", map[string]any{"source": source, "from": "*", "to": "*", "target": "sink", "filter": filter},
			http.StatusCreated, nil)
	}
	spool := filepath.Join(dir, "spool")
	a.call("POST", "/sources", map[string]any{"name": "drop", "kind": "directory", "config": map[string]any{
		"dir": spool, "from": "acme", "to": "globex", "interval": "50ms", "settle": "50ms"}}, http.StatusCreated, nil)

	// The callback's receiver is on loopback, which callbacks reach only
	// when the settings allow it.
	callbacksSetting := map[string]any{"allowed_networks": []string{"127.0.0.0/8", "::1/128"}}
	a.call("PUT", "/settings", map[string]any{"callbacks": callbacksSetting}, http.StatusOK, nil)

	type message struct{ ID, Status string }
	ingest := func(c *api, source, payload string, extra map[string]any) string {
		body := map[string]any{"source": source, "from": "acme", "to": "globex", "payload": payload}
		for k, v := range extra {
			body[k] = v
		}
		var m message
		c.call("POST", "/messages", body, http.StatusCreated, &m)
		return m.ID
	}
	status := func(id string) string {
		var m message
		a.call("GET", "/messages/"+id, nil, http.StatusOK, &m)
		return m.Status
	}
	// A partner's ingest token, scoped to erp and made on the other
	// server, posts there and nowhere else: not to another source, not in
	// the stead of the directory source that Waybill polls.
	var made struct{ Secret string }
	b.call("POST", "/tokens", map[string]any{"name": "partner", "role": "ingest", "sources": []string{"erp"}, "expires": "1h"},
		http.StatusCreated, &made)
	partner := &api{t: t, base: a.base, token: made.Secret}
	for _, source := range []string{"nowhere", "drop"} {
		partner.call("POST", "/messages", map[string]any{"source": source, "from": "acme", "to": "globex", "payload": "x"},
			http.StatusForbidden, nil)
	}
	partner.call("GET", "/messages", nil, http.StatusForbidden, nil)
	ids := []string{
		ingest(a, "erp", "with a callback", map[string]any{"callback_url": hooks.URL + "/callback"}),
		ingest(partner, "erp", "refused until fixed", nil),
		ingest(b, "nowhere", "routed nowhere", nil),
		ingest(a, "erp", "test traffic", map[string]any{"headers": map[string]string{"X-Test": "1"}}),
	}
	// A scheduled message waits for the sweep of either server to queue it.
	var scheduled message
	a.call("POST", "/messages", map[string]any{"source": "erp", "from": "acme", "to": "globex", "payload": "scheduled",
		"delay": "1s"}, http.StatusCreated, &scheduled)
	if scheduled.Status != "scheduled" {
		t.Fatalf("a message with a delay is %s", scheduled.Status)
	}
	// The audit holds in the middle of the work too: deliveries in
	// flight, a callback owed, a bulk runner and retention's loop on.
	audit(t, bin, dbURL)
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, "order.txt"), []byte("from a file"), 0o644); err != nil {
		t.Fatal(err)
	}

	// An alert of messages not routed for each source that had one:
	// nowhere, and erp's test traffic, which its route's filter keeps out.
	testpoll.Until(t, "the workers deliver (the scheduled message once due), the callback is made, the file is taken in, the alerts are sent", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return delivered["with a callback"] == 1 && delivered["from a file"] == 1 && delivered["scheduled"] == 1 && callbacks.Load() == 1 &&
			alerts.Load() == 2 && status(ids[1]) == "error" && status(ids[2]) == "not_routed" &&
			status(ids[3]) == "not_routed"
	})

	// The deliveries are signed with the target's key, the callbacks and
	// the alerts with keys of their own (Standard Webhooks).
	for _, hook := range []struct{ path, secret, sent string }{
		{"/targets/sink/secret", "target sink", "with a callback"},
		{"/callbacks/secret", "callbacks", "/callback"},
		{"/alerts/secret", "alerts", "/alert"},
	} {
		var secret struct{ Keys []struct{ Secret string } }
		a.call("GET", hook.path, nil, http.StatusOK, &secret)
		if len(secret.Keys) != 1 {
			t.Fatalf("the keys of %s: %+v", hook.secret, secret)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret.Keys[0].Secret, "whsec_"))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		sent := signed[hook.sent]
		mu.Unlock()
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(sent[0]))
		if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); sent[1] != want {
			t.Fatalf("the signature of %s %q, want %q over %q", hook.secret, sent[1], want, sent[0])
		}
	}

	// The bulk runner redelivers what failed, once the receiver takes it,
	// and refuses the delivered messages, as its dry run said it would.
	refuse.Store(false)
	redeliver := map[string]any{"action": "redeliver", "filter": map[string]any{"status": []string{"error", "delivered"}}}
	var dry struct {
		Matched, Decided, Done, Refused int
		Refusals                        []struct {
			Code  string
			Count int
		}
	}
	// Asked again until the four messages have settled (one of them may
	// still be on its way to delivered).
	testpoll.Until(t, "a dry run that matches the four messages", func() bool {
		a.call("POST", "/operations", map[string]any{"action": redeliver["action"], "filter": redeliver["filter"], "dry_run": true},
			http.StatusOK, &dry)
		return dry.Matched == 4
	})
	if dry.Matched != 4 || dry.Decided != 4 || dry.Done != 1 || dry.Refused != 3 || len(dry.Refusals) != 1 ||
		dry.Refusals[0].Code != "NOT_REDELIVERABLE" || dry.Refusals[0].Count != 3 {
		t.Fatalf("the dry run: %+v; want 4 matched and decided, 1 done, 3 refused as NOT_REDELIVERABLE", dry)
	}
	var op struct{ ID, State string }
	a.call("POST", "/operations", redeliver, http.StatusAccepted, &op)
	audit(t, bin, dbURL)
	testpoll.Until(t, "the bulk operation redelivers the failed message and refuses the delivered ones", func() bool {
		var got struct {
			State         string
			Done, Refused int
		}
		a.call("GET", "/operations/"+op.ID, nil, http.StatusOK, &got)
		return got.State == "done" && got.Done == dry.Done && got.Refused == dry.Refused && status(ids[1]) == "delivered"
	})

	// An unknown message's resend and replay are 404, again and again, and
	// leave the Writer serving.
	for range 3 {
		for _, action := range []string{"resend", "replay"} {
			var refused struct{ Error struct{ Code string } }
			a.call("POST", "/messages/00000000-0000-0000-0000-000000000000/"+action, map[string]any{}, http.StatusNotFound, &refused)
			if refused.Error.Code != "NOT_FOUND" {
				t.Fatalf("%s of an unknown message: %+v", action, refused)
			}
		}
	}
	// A retry fires when due (base_delay 1s), woken by the process that
	// recorded it: the sweep would wake it 2 s late at the soonest, and
	// record delivery.woken.
	a.call("POST", "/targets", map[string]any{"name": "flaky", "kind": "http", "config": map[string]any{"url": sink.URL + "/flaky"},
		"retry": map[string]any{"strategy": "fixed", "base_delay": "1s", "jitter": 0}}, http.StatusCreated, nil)
	a.call("POST", "/routes", map[string]any{"source": "slow", "from": "*", "to": "*", "target": "flaky"}, http.StatusCreated, nil)
	retried := ingest(a, "slow", "retried on time", nil)
	testpoll.Until(t, "the flaky receiver takes the third attempt", func() bool { return status(retried) == "delivered" })
	mu.Lock()
	calls := slices.Clone(flaky)
	mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("the flaky receiver was called %d times, want 3", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		// The retry is due 1 s after its outcome was recorded, which
		// follows the answer.
		if gap := calls[i].Sub(calls[i-1]); gap < time.Second || gap > time.Second+1500*time.Millisecond {
			t.Errorf("attempt %d came %s after the one before; want 1 s, late by less than 1.5 s", i+1, gap)
		}
	}
	var history struct{ Items []struct{ Kind string } }
	a.call("GET", "/messages/"+retried+"/history", nil, http.StatusOK, &history)
	for _, e := range history.Items {
		if e.Kind == "delivery.woken" {
			t.Errorf("the retried message's history has delivery.woken: the sweep woke a retry: %+v", history.Items)
		}
	}

	// Retention expunges the payloads, then archives and removes every
	// settled message.
	archive := filepath.Join(dir, "archive")
	a.call("PUT", "/settings", map[string]any{"callbacks": callbacksSetting, "retention": map[string]any{
		"payload_after": "1s", "settled_after": "3s", "archive_dir": archive}}, http.StatusOK, nil)
	testpoll.Until(t, "retention removes every message", func() bool {
		var page struct{ Items []message }
		a.call("GET", "/messages", nil, http.StatusOK, &page)
		return len(page.Items) == 0
	})

	// A pass counts what it did once its work has committed, so the
	// counters may trail the messages list by a moment.
	var bulkHeld, expunged, removed, sweeps float64
	testpoll.Until(t, "the metrics count the payloads expunged, the messages removed and the sweeps", func() bool {
		bulkHeld, expunged, removed, sweeps = 0, 0, 0, 0
		for _, s := range servers {
			m := scrape(t, "http://"+s.addr+"/metrics", a.token)
			bulkHeld += m[`waybill_lease_held{loop="bulk"}`]
			expunged += m["waybill_retention_expunged_total"]
			removed += m[`waybill_retention_removed_total{class="settled"}`]
			sweeps += m["waybill_sweep_pass_duration_seconds_count"]
		}
		return expunged >= 1 && removed == 7 && sweeps >= 2
	})
	// Retention and the alerts hold their leases only while they work, so
	// two scrapes a moment apart may each see one held: only the bulk
	// runner's, held for the life of a process, adds up across them.
	if bulkHeld != 1 {
		t.Errorf("the bulk lease is held by %v processes; want 1", bulkHeld)
	}
	if files, _ := filepath.Glob(filepath.Join(archive, "*", "*", "*.jsonl.gz")); len(files) == 0 {
		t.Error("retention archived nothing")
	}

	// A receiver that answers 410 Gone has its target disabled, alerted
	// once, and its health shows it; the healthy one's breaker is closed.
	a.call("POST", "/targets", map[string]any{"name": "gone", "kind": "http", "config": map[string]any{"url": sink.URL + "/gone"}},
		http.StatusCreated, nil)
	a.call("POST", "/routes", map[string]any{"source": "iot", "from": "*", "to": "*", "target": "gone"}, http.StatusCreated, nil)
	// Through the server that made the route: another learns of a change
	// by a lossy wake-up, or within ConfigTTL.
	ingest(a, "iot", "to a receiver gone", nil)
	type health struct {
		Enabled bool
		Health  struct{ State string }
	}
	testpoll.Until(t, "a 410 disables its target and the alert is sent", func() bool {
		var target health
		a.call("GET", "/targets/gone", nil, http.StatusOK, &target)
		return !target.Enabled && target.Health.State == "disabled" && disabledAlerts.Load() == 1
	})
	var sinkHealth health
	b.call("GET", "/targets/sink", nil, http.StatusOK, &sinkHealth)
	if sinkHealth.Health.State != "closed" {
		t.Errorf("the healthy target's health is %q, want closed", sinkHealth.Health.State)
	}

	for _, s := range servers {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := s.cmd.Wait(); err != nil {
			t.Fatalf("serve exited with %v", err)
		}
	}
	audit(t, bin, dbURL, "--archive", archive)
}

// audit runs waybill audit on the database, beside the running servers,
// and fails the test unless it finds no violation.
func audit(t *testing.T, bin, dbURL string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"audit", "--database-url", dbURL}, args...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "; 0 violations") {
		t.Fatalf("audit: %v\n%s", err, out)
	}
}

// scrape reads a server's metrics at url, with the token unless it is "":
// each sample's name with its labels, as the text format writes them, and
// its value.
func scrape(t *testing.T, url, token string) map[string]float64 {
	t.Helper()
	resp := get(t, url, token)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			samples[line[:i]] = v
		}
	}
	return samples
}

// get sends GET url, with the token unless it is "".
func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestMetricsTakeATokenOrAnAddressOfTheirOwn: /metrics on the main
// listener answers a token of any role and nothing else; with
// --metrics-listen it is served there alone, without a token, and no
// longer on the main listener.
func TestMetricsTakeATokenOrAnAddressOfTheirOwn(t *testing.T) {
	t.Parallel()
	_, dbURL, ns := shared(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	metricsAddr := freeAddr(t)
	onMain := startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", filepath.Join(dir, "main"))
	own := startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", filepath.Join(dir, "own"),
		"--metrics-listen", metricsAddr)
	a := onMain.adminClient(t, filepath.Join(dir, "main"))
	for _, token := range []string{"", "wb_not-a-token"} {
		resp := get(t, "http://"+onMain.addr+"/metrics", token)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("/metrics with token %q: %s, want 401", token, resp.Status)
		}
	}
	// Each process's own metrics: both hold a gauge of the bulk lease.
	const lease = `waybill_lease_held{loop="bulk"}`
	if _, ok := scrape(t, "http://"+onMain.addr+"/metrics", a.token)[lease]; !ok {
		t.Errorf("the main listener's metrics lack %s", lease)
	}
	if _, ok := scrape(t, "http://"+metricsAddr+"/metrics", "")[lease]; !ok {
		t.Errorf("the metrics' own address lacks %s", lease)
	}
	for _, url := range []string{"http://" + own.addr + "/metrics", "http://" + metricsAddr + "/api/v1/stats"} {
		resp := get(t, url, a.token)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", url, resp.Status)
		}
	}
}
