package bench

import (
	"context"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCreatedID: the bench reads the id of a created message from the
// first member of the answer, and nothing from any other answer.
func TestCreatedID(t *testing.T) {
	for _, c := range []struct{ answer, want string }{
		{`{"id":"0190-a","status":"queued","deliveries":[{"id":"x"}]}`, "0190-a"},
		{`{"id": "0190-b"}`, "0190-b"},
		{`{"status":"queued","id":"0190-c"}`, ""},
		{`{"id":7}`, ""},
		{`[]`, ""},
		{``, ""},
	} {
		if got := createdID([]byte(c.answer)); got != c.want {
			t.Errorf("createdID(%s) = %q, want %q", c.answer, got, c.want)
		}
	}
}

// TestValidate: each value out of range is named by its flag, with what is
// allowed; the defaults with the server's wiring pass.
func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Serve = func(context.Context, ServerConfig) error { return nil }
	ok.ServeCommand = func(ServerConfig) (*exec.Cmd, error) { return nil, nil }
	ok.OpenDB = func(context.Context, string) (*pgxpool.Pool, error) { return nil, nil }
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Messages = 0 }, "--messages must be at least 1, not 0"},
		{func(c *Config) { c.Clients = -1 }, "--clients must be at least 1, not -1"},
		{func(c *Config) { c.Concurrency = -1 }, "--concurrency must not be negative, not -1"},
		{func(c *Config) { c.Slots = -1 }, "--slots must not be negative, not -1"},
		{func(c *Config) { c.TargetRate = -1 }, "--target-rate must not be negative, not -1"},
		{func(c *Config) { c.Rate = -0.5 }, "--rate must not be negative, not -0.5"},
		{func(c *Config) { c.Backlog = -2 }, "--backlog must not be negative, not -2"},
		{func(c *Config) { c.Keys = -3 }, "--keys must not be negative, not -3"},
		{func(c *Config) { c.Transform = "{}" }, "--transform goes with --backlog"},
		{func(c *Config) { c.OpenDB = nil }, "Serve, ServeCommand and OpenDB must be set"},
	} {
		cfg := ok
		c.change(&cfg)
		if err := cfg.Validate(); err == nil || err.Error() != c.want {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}

// TestValidateNamesEveryValue: several values out of range are all named,
// on one line.
func TestValidateNamesEveryValue(t *testing.T) {
	cfg := Config{Messages: 0, Clients: 1, Concurrency: 1, Rate: -1}
	want := "--messages must be at least 1, not 0; --rate must not be negative, not -1; Serve, ServeCommand and OpenDB must be set"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v, want %q", err, want)
	}
}

// TestRateAfterBurst: the burst goes at once and is not counted; the rest
// over the time from the first claim to the last is the rate, and the
// whole seconds after the first give the quietest and busiest.
func TestRateAfterBurst(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 15, 0, 0, 0, time.UTC)
	// at is burst claims at t0, then n more, one every step.
	at := func(burst, n int, step time.Duration) []time.Time {
		var out []time.Time
		for range burst {
			out = append(out, t0)
		}
		for i := range n {
			out = append(out, t0.Add(time.Duration(i+1)*step))
		}
		return out
	}
	uneven := at(1, 40, 100*time.Millisecond)
	uneven = append(uneven, t0.Add(1500*time.Millisecond), t0.Add(1600*time.Millisecond))
	for _, c := range []struct {
		name              string
		at                []time.Time
		burst             int
		rate              float64
		quietest, busiest int
	}{
		{"exact, at 1,000/s after a burst of 1,000", at(1000, 19000, time.Millisecond), 1000, 1000, 1000, 1000},
		{"exact, at 10/s after a burst of 10", at(10, 40, 100*time.Millisecond), 10, 10, 10, 10},
		{"two claims more in the second second", uneven, 0, 43.0 / 4, 10, 12},
		{"under three seconds", at(5, 20, 100*time.Millisecond), 5, 10, 0, 0},
		{"no more claims than the burst", at(5, 0, 0), 5, 0, 0, 0},
		{"none", nil, 5, 0, 0, 0},
	} {
		rate, quietest, busiest := rateAfterBurst(c.at, c.burst)
		if math.Abs(rate-c.rate) > 1e-9 || quietest != c.quietest || busiest != c.busiest {
			t.Errorf("%s: %g/s, %d to %d a second; want %g/s, %d to %d", c.name, rate, quietest, busiest, c.rate, c.quietest, c.busiest)
		}
	}
}

// TestWritesPrintSaysWhyEntriesAreMissing: a run whose log could not be
// read still prints its row versions, and says why the index entries are
// not counted.
func TestWritesPrintSaysWhyEntriesAreMissing(t *testing.T) {
	for _, c := range []struct {
		name string
		w    projectionWrites
		want []string
	}{
		{"counted", projectionWrites{rows: map[string]tableWrites{"messages": {ins: 10, upd: 10}},
			entries: map[string]int64{"messages": 120}, walBytes: 70_000},
			[]string{"2.00 row versions (0.00 HOT), 12.00 index entries in the projections; 7000 bytes", "messages 1.00/1.00/0.00/0.00/12.00"}},
		{"not counted", projectionWrites{rows: map[string]tableWrites{"messages": {ins: 10, upd: 10, hot: 5}},
			uncounted: "the run's log could not be read: gone", walBytes: 70_000},
			[]string{"2.00 row versions (0.50 HOT), index entries not counted (the run's log could not be read: gone)",
				"(inserted/updated/HOT/deleted): messages 1.00/1.00/0.50/0.00\n"}},
	} {
		var out strings.Builder
		c.w.print(&out, 10)
		for _, want := range c.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: %q lacks %q", c.name, out.String(), want)
			}
		}
	}
}
