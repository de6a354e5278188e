package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/bench"
	"github.com/waybill/waybill/internal/testpoll"
)

// scaleEnv opts in to TestOnlineRebuildAtScale: the number of messages
// loaded before it (six events each).
const scaleEnv = "WAYBILL_ONLINE_SCALE"

// scaleShareEnv, when set, is the rebuild's --share in
// TestOnlineRebuildAtScale (1: the fold at full speed).
const scaleShareEnv = "WAYBILL_ONLINE_SHARE"

// baseline is how long TestOnlineRebuildAtScale measures the ingest
// before the rebuild starts, the rate it compares the rebuild's with.
const baseline = 20 * time.Second

// TestOnlineRebuildAtScale measures `waybill rebuild --online` on a
// database of WAYBILL_ONLINE_SCALE messages, loaded by SQL, beside a server
// under a steady ingest of 500 messages/s over REST: it logs the phases'
// times, the switch's lock, the ingest's rate and its failed requests
// (none may fail), the ingest's rate over a window before the rebuild and
// during it, checks the audit and that the tables equal an offline
// rebuild's. Not in make test: WAYBILL_ONLINE_SCALE=1000000 go test -run
// TestOnlineRebuildAtScale -timeout 60m ./cmd/waybill (docs/performance.md).
func TestOnlineRebuildAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(scaleEnv))
	if n <= 0 {
		t.Skip(scaleEnv + " is not set: this measure runs on demand")
	}
	ctx := t.Context()
	bin := buildBinary(t)
	db, dbURL, ns := shared(t)
	var delivered atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		delivered.Add(1)
	}))
	defer sink.Close()
	dir := t.TempDir()
	args := []string{"--database-url", dbURL, "--nats-url", ns.ClientURL(), "--data-dir", dir}
	s := startServer(t, bin, args...)
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := &api{t: t, base: "http://" + s.addr + "/api/v1", token: strings.TrimSpace(string(token))}
	for _, name := range []string{"archive", "billing"} {
		admin.call("POST", "/targets", map[string]any{"name": name, "kind": "http", "enabled": true,
			"config": map[string]any{"url": sink.URL}}, http.StatusCreated, nil)
		admin.call("POST", "/routes", map[string]any{"source": "erp", "from": "*", "to": "*", "target": name}, http.StatusCreated, nil)
	}
	stopServer(t, s)

	began := time.Now()
	loadDelivered(t, db, n)
	t.Logf("loaded %d messages, %d events by SQL in %s", n, journalEvents(t, db), time.Since(began).Round(time.Second))
	began = time.Now()
	if out, err := exec.Command(bin, "rebuild", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("offline rebuild: %v\n%s", err, out)
	}
	t.Logf("offline rebuild (fold, tables, audit) in %s", time.Since(began).Round(100*time.Millisecond))
	if _, err := db.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}

	s = startServer(t, bin, args...)
	admin.base = "http://" + s.addr + "/api/v1"
	const rate = 500
	var (
		acked, failed atomic.Int64
		stop          = make(chan struct{})
		wg            sync.WaitGroup
		slowest       atomic.Int64
	)
	due := make(chan int)
	wg.Go(func() {
		defer close(due)
		// The schedule counts from the start, so a late wake-up sends what
		// fell due meanwhile: a ticker at the rate's own period drops the
		// ticks its reader misses, and paced fewer than 500 a second.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for ; i < int(time.Since(start).Seconds()*rate); i++ {
				select {
				case due <- i:
				case <-stop:
					return
				}
			}
		}
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for range 32 {
		wg.Go(func() {
			for i := range due {
				key := fmt.Sprint("live-", i)
				body, _ := json.Marshal(map[string]any{"source": "erp", "from": "a", "to": "b", "payload": key, "idempotency_key": key})
				req, _ := http.NewRequest("POST", admin.base+"/messages", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+admin.token)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					t.Logf("ingest %s: %v", key, err)
					continue
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if took := time.Since(start); took.Nanoseconds() > slowest.Load() {
					slowest.Store(took.Nanoseconds())
				}
				if resp.StatusCode != http.StatusCreated {
					failed.Add(1)
					t.Logf("ingest %s: %d %s", key, resp.StatusCode, data)
					continue
				}
				acked.Add(1)
			}
		})
	}
	ingestStart := time.Now()
	steady := func(what string) {
		from := acked.Load()
		testpoll.Until(t, "a thousand more messages acknowledged "+what, func() bool { return acked.Load() >= from+1000 || failed.Load() > 0 })
	}
	steady("before the rebuild")
	// A window of time, not a state: the rate of the ingest alone, in the
	// machine's conditions of the moment.
	from, baseFrom := acked.Load(), time.Now()
	<-time.After(baseline)
	baseRate := float64(acked.Load()-from) / time.Since(baseFrom).Seconds()
	rebuild := []string{"rebuild", "--online", "--database-url", dbURL}
	if share := os.Getenv(scaleShareEnv); share != "" {
		rebuild = append(rebuild, "--share", share)
	}
	from, began = acked.Load(), time.Now()
	cmd := exec.Command(bin, rebuild...)
	out, err := cmd.CombinedOutput()
	took := time.Since(began)
	duringRate := float64(acked.Load()-from) / took.Seconds()
	// The rebuild process's own CPU, its PostgreSQL backends' not counted:
	// what the pacing holds back, whatever else the machine runs.
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	t.Logf("ingest alone %.0f messages/s over %s; during the rebuild (%s) %.0f messages/s: %.2f of it; the rebuild's process used %s of CPU, %.2f cores on average",
		baseRate, baseline, strings.Join(rebuild[4:], " "), duringRate, duringRate/baseRate, cpu.Round(100*time.Millisecond), cpu.Seconds()/took.Seconds())
	steady("after the rebuild")
	close(stop)
	wg.Wait()
	ingestFor := time.Since(ingestStart)
	if err != nil || !strings.Contains(string(out), "; 0 violations") {
		t.Fatalf("online rebuild: %v\n%s", err, out)
	}
	lock := regexp.MustCompile(`lock_held=(\S+)`).FindStringSubmatch(string(out))
	if lock == nil {
		t.Fatalf("no lock_held in:\n%s", out)
	}
	held, err := time.ParseDuration(lock[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("online rebuild in %s, the switch's lock held %s; ingest %d acknowledged in %s (%.0f messages/s), %d failed, the slowest answer %s\n%s",
		took.Round(100*time.Millisecond), held, acked.Load(), ingestFor.Round(100*time.Millisecond),
		float64(acked.Load())/ingestFor.Seconds(), failed.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), out)
	if failed.Load() > 0 {
		t.Errorf("%d ingests failed", failed.Load())
	}
	if held >= time.Second {
		t.Errorf("the switch held the live tables %s", held)
	}
	// The backlog the ingest left may take the workers more than a minute
	// on a loaded machine: wait while it shrinks.
	undelivered := func() int64 {
		var n int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM messages WHERE status <> 'delivered'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for open := undelivered(); open > 0; {
		testpoll.Until(t, "fewer messages undelivered than "+fmt.Sprint(open), func() bool {
			n := undelivered()
			if n < open {
				open = n
				return true
			}
			return false
		})
	}
	began = time.Now()
	audit(t, bin, dbURL)
	t.Logf("audit beside the server in %s", time.Since(began).Round(100*time.Millisecond))
	online := tablesDigest(t, db)
	stopServer(t, s)
	if out, err := exec.Command(bin, "rebuild", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("offline rebuild: %v\n%s", err, out)
	}
	if offline := tablesDigest(t, db); online != offline {
		t.Fatalf("the tables after the online rebuild differ from an offline rebuild's:\nonline  %s\noffline %s", online, offline)
	}
}

// loadDelivered fills the journal by SQL with n messages of six events,
// from erp to archive and billing, each delivered at its first attempt,
// over the last seven days, and their payloads (bench.LoadJournal).
func loadDelivered(t *testing.T, db *pgxpool.Pool, n int) {
	t.Helper()
	err := bench.LoadJournal(t.Context(), db, bench.Synthetic{Messages: n, End: time.Now().Add(-time.Hour), Span: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
}

func journalEvents(t *testing.T, db *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM journal`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// tablesDigest sums a hash of every row of messages and deliveries, and
// the delivery counts by target and state: equal tables, equal digests,
// without the rows leaving the database.
func tablesDigest(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := db.QueryRow(t.Context(), `SELECT concat_ws(' ',
		(SELECT count(*) || ':' || coalesce(sum(hashtextextended(r::text, 0)::numeric), 0) FROM messages r),
		(SELECT count(*) || ':' || coalesce(sum(hashtextextended(r::text, 0)::numeric), 0) FROM deliveries r),
		(SELECT string_agg(format('%s/%s=%s', target, state, n), ',' ORDER BY target, state)
			FROM (SELECT target, state, sum(n) AS n FROM delivery_counts GROUP BY 1, 2 HAVING sum(n) <> 0) c))`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
