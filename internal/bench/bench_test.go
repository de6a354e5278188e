package bench

import (
	"context"
	"os/exec"
	"testing"

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
