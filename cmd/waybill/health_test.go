package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// receiver is a loopback endpoint that answers as the test says and
// keeps when each request came, and for which delivery.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	answer   func(w http.ResponseWriter) int
	requests []hit
}

type hit struct {
	at       time.Time
	delivery string
	status   int
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter) int) *receiver {
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		at := time.Now()
		rc.mu.Lock()
		status := rc.answer(w)
		rc.requests = append(rc.requests, hit{at: at, delivery: r.Header.Get("Idempotency-Key"), status: status})
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) setAnswer(answer func(w http.ResponseWriter) int) {
	rc.mu.Lock()
	rc.answer = answer
	rc.mu.Unlock()
}

func (rc *receiver) got() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.requests)
}

// between counts the requests that came from from on and before to.
func between(rs []hit, from, to time.Time) int {
	n := 0
	for _, r := range rs {
		if !r.at.Before(from) && r.at.Before(to) {
			n++
		}
	}
	return n
}

// betweenFor counts the requests of one delivery in [from, to).
func betweenFor(rs []hit, from, to time.Time, delivery string) int {
	n := 0
	for _, r := range rs {
		if r.delivery == delivery && !r.at.Before(from) && r.at.Before(to) {
			n++
		}
	}
	return n
}

func answering(status int) func(http.ResponseWriter) int {
	return func(http.ResponseWriter) int { return status }
}

// healthEvents returns the events of target's health stream.
func healthEvents(t *testing.T, db *pgxpool.Pool, target string) []journal.Event {
	t.Helper()
	events, err := journal.Stream(context.Background(), db, journal.TargetStream(target))
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// alertsSeen is what the alert webhook was sent.
type alertsSeen struct {
	mu  sync.Mutex
	got []alertSeen
}

type alertSeen struct {
	Code       string
	Key        string
	DeliveryID string `json:"delivery_id"`
}

// count counts the alerts of code about target.
func (a *alertsSeen) count(code, target string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, g := range a.got {
		if g.Code == code && g.Key == code+":"+target {
			n++
		}
	}
	return n
}

// TestHealthAcrossThreeServers runs three servers on one PostgreSQL and
// one NATS, with a target per part of a target's health, messages
// ingested through all three, and receivers on loopback. A breaker
// opened by one server holds every server's attempts until its cooldown,
// then lets exactly one probe through; the backlog goes in due order once
// it closes. A receiver's 429 with Retry-After holds its target from
// every server for as long. A target that only fails for its
// disable_after is disabled once, journaled and alerted once, its held
// deliveries neither stalled nor alerted, and sent once it is enabled
// again. The audit of the journal is clean at the end.
func TestHealthAcrossThreeServers(t *testing.T) {
	// Not parallel: the breaker's windows are timed to the second, which
	// the tests beside it would starve.
	db, dbURL, ns := shared(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	alerts := &alertsSeen{}
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		var a alertSeen
		if err := json.Unmarshal(data, &a); err != nil {
			t.Errorf("alert %s: %v", data, err)
		}
		alerts.mu.Lock()
		alerts.got = append(alerts.got, a)
		alerts.mu.Unlock()
	}))
	defer hooks.Close()
	servers := make([]*server, 3)
	for i := range servers {
		servers[i] = startServer(t, bin, "--database-url", dbURL, "--nats-url", ns.ClientURL(),
			"--data-dir", filepath.Join(dir, "var"+strconv.Itoa(i)), "--alert-webhook", hooks.URL+"/alert")
	}
	token := servers[0].adminClient(t, filepath.Join(dir, "var0")).token
	via := func(t *testing.T) []*api {
		out := make([]*api, len(servers))
		for i, s := range servers {
			out[i] = s.client(t, token)
		}
		return out
	}
	// One unclaimed wake-up stalls a delivery: a held delivery the sweep
	// did not leave alone would stall, and be alerted, within seconds.
	via(t)[0].call("PUT", "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 1}}, http.StatusOK, nil)
	fast := map[string]any{"strategy": "fixed", "base_delay": "100ms", "max_delay": "10s", "jitter": 0, "max_attempts": 1000}
	target := func(a *api, name, url string, health any) {
		a.call("POST", "/targets", map[string]any{"name": name, "kind": "http", "max_concurrent": 2, "retry": fast,
			"health": health, "config": map[string]any{"url": url}}, http.StatusCreated, nil)
		a.call("POST", "/routes", map[string]any{"source": name, "from": "*", "to": "*", "target": name}, http.StatusCreated, nil)
	}
	// ingest sends n messages to source, round the servers.
	ingest := func(apis []*api, source string, n int) {
		for i := range n {
			apis[i%len(apis)].call("POST", "/messages", map[string]any{"source": source, "from": "acme", "to": "globex",
				"payload": fmt.Sprintf("%s %d", source, i)}, http.StatusCreated, nil)
		}
	}
	delivered := func(target string) int {
		var n int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE target = $1 AND state = 'delivered'`,
			target).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}

	t.Run("parts", func(t *testing.T) {
		t.Run("breaker", func(t *testing.T) {
			t.Parallel()
			apis := via(t)
			const minRequests, perServer, n = 5, 2, 12
			rc := newReceiver(t, answering(http.StatusInternalServerError))
			target(apis[0], "breaker", rc.URL, map[string]any{"breaker": map[string]any{"window": "30s", "min_requests": minRequests,
				"failure_rate": 0.5, "cooldown": "3s", "max_cooldown": "6s"}, "disable_after": nil})
			ingest(apis, "breaker", n)
			var events []journal.Event
			testpoll.Until(t, "the breaker to open, half-open and open again", func() bool {
				events = healthEvents(t, db, "breaker")
				return len(events) >= 3
			})
			// Every server shows it open, as the database has it.
			for _, a := range apis {
				var got struct{ Health struct{ State string } }
				a.call("GET", "/targets/breaker", nil, http.StatusOK, &got)
				if got.Health.State != string(lifecycle.HealthOpen) {
					t.Errorf("%s shows the breaker %s, want open", a.base, got.Health.State)
				}
			}
			// The backlog held, in due order, then the receiver heals.
			rows, err := db.Query(context.Background(), `SELECT id FROM deliveries WHERE target = 'breaker' AND state <> 'delivered'
				ORDER BY coalesce(next_due, lease_end, updated_at), id`)
			if err != nil {
				t.Fatal(err)
			}
			held, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			if err != nil {
				t.Fatal(err)
			}
			rc.setAnswer(answering(http.StatusOK))
			testpoll.Until(t, "the backlog delivered", func() bool { return delivered("breaker") == n })

			events = healthEvents(t, db, "breaker")
			want := []journal.Kind{journal.KindBreakerOpened, journal.KindBreakerHalfOpened, journal.KindBreakerOpened,
				journal.KindBreakerHalfOpened, journal.KindBreakerClosed}
			if got := kindsOf(events); !slices.Equal(got, want) {
				t.Fatalf("health events %v, want %v", got, want)
			}
			rs := rc.got()
			opened, halfOpened, reopened, probed := events[0], events[1], events[2], events[3]
			if got := between(rs, time.Time{}, halfOpened.RecordedAt); got > minRequests+perServer*len(servers) {
				t.Errorf("%d requests before the breaker half-opened, want at most %d", got, minRequests+perServer*len(servers))
			}
			// The journal says what was attempted when, in its order (the
			// audit's): one claim while half-open, none while open. At the
			// receiver, a request of an attempt claimed before the breaker
			// opened may arrive late on a busy machine, so there only the
			// probe is looked for.
			claims := func(from, to journal.Event) []uuid.UUID {
				rows, err := db.Query(context.Background(), `SELECT delivery_id FROM journal WHERE target = 'breaker' AND kind = $1
					AND position > $2 AND position < $3 ORDER BY position`, journal.KindDeliveryClaimed, from.Position, to.Position)
				if err != nil {
					t.Fatal(err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
				if err != nil {
					t.Fatal(err)
				}
				return ids
			}
			if got := claims(opened, halfOpened); len(got) != 0 {
				t.Errorf("%d claims while the breaker was open", len(got))
			}
			if got := claims(reopened, probed); len(got) != 0 {
				t.Errorf("%d claims while the breaker was open again", len(got))
			}
			// One probe: a late outcome of an attempt claimed before the
			// breaker opened neither decides it nor frees the probe's
			// place, and the probe's own keeps it until the breaker's
			// event.
			probes := claims(halfOpened, reopened)
			if len(probes) == 0 {
				t.Error("no claim while half-open, want the one probe")
			} else if got := betweenFor(rs, halfOpened.RecordedAt, reopened.RecordedAt, probes[0].String()); got != 1 {
				t.Errorf("the probe reached the receiver %d times while half-open, want once", got)
			}
			if len(probes) > 1 {
				t.Errorf("%d claims while half-open, want the one probe: %v", len(probes), probes)
			}
			// The claims after the close take the held backlog in due
			// order, but for those made at once by the servers' slots, and
			// one batch more: at the close, a claim the gate still refuses
			// rolls back the rows it had locked, which another server's
			// claim, skipping locked rows, passed over.
			slack := perServer * (len(servers) + 1)
			after := claims(probed, journal.Event{Position: math.MaxInt64})
			if len(after) != len(held) {
				t.Fatalf("%d claims after the cooldown, want the %d held", len(after), len(held))
			}
			for i, id := range after {
				if d := slices.Index(held, id) - i; d > slack || d < -slack {
					t.Errorf("claim %d after the cooldown is the held delivery %d in due order", i, i+d)
				}
			}
			t.Logf("breaker: %d requests before it half-opened, 1 probe, %d held claimed after the cooldown",
				between(rs, time.Time{}, halfOpened.RecordedAt), len(after))
			if got := alerts.count("target_unhealthy", "breaker"); got != 1 {
				t.Errorf("%d target_unhealthy alerts, want 1 for the episode", got)
			}
		})

		t.Run("throttle", func(t *testing.T) {
			t.Parallel()
			apis := via(t)
			const retryAfter = 2 * time.Second
			var once sync.Once
			rc := newReceiver(t, func(w http.ResponseWriter) int {
				status := http.StatusOK
				once.Do(func() {
					w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter.Seconds())))
					status = http.StatusTooManyRequests
				})
				return status
			})
			target(apis[0], "throttle", rc.URL, map[string]any{})
			ingest(apis[:1], "throttle", 1)
			testpoll.Until(t, "the receiver's hold", func() bool { return len(healthEvents(t, db, "throttle")) == 1 })
			ingest(apis, "throttle", 9)
			testpoll.Until(t, "every message delivered", func() bool { return delivered("throttle") == 10 })
			rs := rc.got()
			if rs[0].status != http.StatusTooManyRequests {
				t.Fatalf("first answer %d", rs[0].status)
			}
			if got := between(rs[1:], rs[0].at, rs[0].at.Add(retryAfter)); got != 0 {
				t.Errorf("%d requests within the Retry-After", got)
			}
			t.Logf("throttle: the next request %v after the 429", rs[1].at.Sub(rs[0].at).Round(time.Millisecond))
		})

		t.Run("disable", func(t *testing.T) {
			t.Parallel()
			apis := via(t)
			const after = 3 * time.Second
			rc := newReceiver(t, answering(http.StatusInternalServerError))
			health := map[string]any{"breaker": nil, "disable_after": after.String()}
			target(apis[0], "failing", rc.URL, health)
			ingest(apis, "failing", 5)
			var disabledAt time.Time
			testpoll.Until(t, "the target disabled and alerted", func() bool {
				var got struct{ Enabled bool }
				apis[1].call("GET", "/targets/failing", nil, http.StatusOK, &got)
				if got.Enabled || alerts.count("target_disabled", "failing") == 0 {
					return false
				}
				disabledAt = time.Now()
				return true
			})
			// Held past a wake-up's back-off and several sweeps of every
			// server: neither stalled nor alerted.
			sweeps := func() float64 {
				total := 0.0
				for _, s := range servers {
					total += scrape(t, "http://"+s.addr+"/metrics", apis[0].token)["waybill_sweep_pass_duration_seconds_count"]
				}
				return total
			}
			base := sweeps()
			testpoll.Until(t, "a wake-up's back-off and two sweeps of each server to pass", func() bool {
				return time.Since(disabledAt) > lifecycle.DispatchBackoff(1)+time.Second && sweeps() >= base+2*float64(len(servers))
			})
			var stalled int
			if err := db.QueryRow(context.Background(), `SELECT count(*) FROM deliveries WHERE target = 'failing' AND state = 'stalled'`).
				Scan(&stalled); err != nil {
				t.Fatal(err)
			}
			if stalled != 0 {
				t.Errorf("%d held deliveries stalled", stalled)
			}
			rc.setAnswer(answering(http.StatusOK))
			enabledAt := time.Now()
			apis[2].call("PUT", "/targets/failing", map[string]any{"kind": "http", "enabled": true, "max_concurrent": 2, "retry": fast,
				"health": health, "config": map[string]any{"url": rc.URL}}, http.StatusOK, nil)
			testpoll.Until(t, "the held deliveries sent once enabled", func() bool { return delivered("failing") == 5 })
			if got := between(rc.got(), disabledAt, enabledAt); got != 0 {
				t.Errorf("%d requests while disabled", got)
			}
			var events []*journal.TargetDisabled
			all, err := journal.Stream(context.Background(), db, journal.ConfigStream)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range all {
				if p, ok := e.Payload.(*journal.TargetDisabled); ok {
					events = append(events, p)
				}
			}
			if len(events) != 1 || events[0].Target != "failing" || events[0].Reason != journal.DisabledFailing {
				t.Errorf("target.disabled events %+v, want one of failing, reason failing", events)
			}
			if got := alerts.count("target_disabled", "failing"); got != 1 {
				t.Errorf("%d target_disabled alerts, want 1", got)
			}
			rows, err := db.Query(context.Background(), `SELECT id::text FROM deliveries WHERE target = 'failing'`)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			alerts.mu.Lock()
			for _, a := range alerts.got {
				if a.Code == "delivery_stalled" && slices.Contains(ids, a.DeliveryID) {
					t.Errorf("delivery_stalled alert for the held delivery %s", a.DeliveryID)
				}
			}
			alerts.mu.Unlock()
		})
	})
	audit(t, bin, dbURL)
}

func kindsOf(events []journal.Event) []journal.Kind {
	out := make([]journal.Kind, len(events))
	for i, e := range events {
		out[i] = e.Kind()
	}
	return out
}
