package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config is what a bench runs with: the flags of `waybill bench` and the
// server it measures, which the command provides.
type Config struct {
	// Backlog, when not 0, measures the drain of a backlog of that many
	// deliveries instead of the throughput of Messages.
	Backlog int
	// HTTP ingests through the REST API; without it the clients call the
	// commands directly.
	HTTP bool
	// Messages is the number of messages the throughput run ingests.
	Messages int
	// Clients is the number of concurrent clients that ingest.
	Clients int
	// Rate bounds the throughput run's ingest to Rate messages/s in all;
	// 0 is as fast as it goes.
	Rate float64
	// Slots is how many attempts each target takes at once in the
	// server's process (its slots); 0 is the run's default: 80 in a
	// throughput run, 100 in a drain.
	Slots int
	// Concurrency, when not 0, is the targets' max_concurrent, which
	// bounds the cluster: the claims count each target's attempts in
	// flight. Their slots are then no more than it.
	Concurrency int
	// TargetRate, when not 0, is the backlog target's rate.per_second
	// (its burst the default).
	TargetRate float64
	// Keys, when not 0, makes the backlog target fifo and spreads the
	// messages over that many ordering keys, in turn: each key's lane
	// drains one delivery at a time.
	Keys int
	// Signing is the targets' signing scheme; empty is the default a new
	// target gets (hmac-sha256).
	Signing string
	// Transform is the backlog target's transform (a CEL expression,
	// docs/routing.md), which must send every delivery; empty for none.
	// The backlog's messages are JSON either way, so a transform can read
	// their fields: id, amount and customer.
	Transform string
	// DatabaseURL is the PostgreSQL the bench writes to; when empty it
	// starts its own in a temporary directory.
	DatabaseURL string
	// CPUProfile, when set, is the file the process's CPU profile of the
	// throughput run is written to.
	CPUProfile string
	// Statements loads pg_stat_statements into the bench's own PostgreSQL
	// and prints the statements that took the most time during the run.
	Statements bool

	// Serve runs a server in this process until ctx ends: the throughput
	// run's.
	Serve func(ctx context.Context, s ServerConfig) error
	// ServeCommand returns the command that runs a server in a process of
	// its own: the backlog run's, so that its CPU and memory are its own.
	ServeCommand func(s ServerConfig) (*exec.Cmd, error)
	// OpenDB opens a pool as the server opens its own: the throughput
	// run's commands write through it.
	OpenDB func(ctx context.Context, url string) (*pgxpool.Pool, error)
}

// ServerConfig is what a server the bench starts runs with.
type ServerConfig struct {
	// DataDir is the server's data directory (its admin token).
	DataDir string
	// DatabaseURL is the database it uses.
	DatabaseURL string
	// NATSURL is the NATS it uses; empty for its own embedded one.
	NATSURL string
	// Listen is the address of its HTTP server.
	Listen string
}

// The targets' slots when Slots is 0: those the bench's targets had when
// max_concurrent bounded each process alone.
const (
	throughputSlots = 80
	drainSlots      = 100
)

// DefaultConfig is the configuration of `waybill bench` without flags.
func DefaultConfig() Config {
	return Config{Messages: 5000, Clients: 8}
}

// limit gives target its slots, def unless c says otherwise, and its
// max_concurrent, and returns them in words.
func (c Config) limit(target map[string]any, def int) string {
	slots := cmp.Or(c.Slots, def)
	if c.Concurrency == 0 {
		target["slots"] = slots
		return fmt.Sprintf("%d slots, no max_concurrent", slots)
	}
	slots = min(slots, c.Concurrency)
	target["slots"], target["max_concurrent"] = slots, c.Concurrency
	return fmt.Sprintf("%d slots, max_concurrent %d", slots, c.Concurrency)
}

// Validate checks the configuration and names, by its flag, each value
// that is out of range, in one line.
func (c Config) Validate() error {
	var errs []string
	for _, f := range []struct {
		flag  string
		value int
	}{{"messages", c.Messages}, {"clients", c.Clients}} {
		if f.value < 1 {
			errs = append(errs, fmt.Sprintf("--%s must be at least 1, not %d", f.flag, f.value))
		}
	}
	for _, f := range []struct {
		flag  string
		value float64
	}{{"rate", c.Rate}, {"backlog", float64(c.Backlog)}, {"keys", float64(c.Keys)}, {"slots", float64(c.Slots)}, {"concurrency", float64(c.Concurrency)},
		{"target-rate", c.TargetRate}} {
		if f.value < 0 {
			errs = append(errs, fmt.Sprintf("--%s must not be negative, not %g", f.flag, f.value))
		}
	}
	if c.Signing != "" && !slices.Contains([]string{"hmac-sha256", "ed25519", "none"}, c.Signing) {
		errs = append(errs, fmt.Sprintf("--signing must be hmac-sha256, ed25519 or none, not %q", c.Signing))
	}
	if c.Transform != "" && c.Backlog == 0 {
		errs = append(errs, "--transform goes with --backlog")
	}
	if c.Serve == nil || c.ServeCommand == nil || c.OpenDB == nil {
		errs = append(errs, "Serve, ServeCommand and OpenDB must be set")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
