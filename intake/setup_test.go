package intake

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sources"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const admin = "operator:admin"

// quiet keeps the logs to warnings and errors.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// fixture is what a test of the sources works with: a database and a
// Writer on a clock that moves only when the test says.
type fixture struct {
	ctx   context.Context
	db    *pgxpool.Pool
	clock *testclock.Clock
	base  service.Base
	w     *commands.Writer
}

func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{ctx: t.Context(), clock: testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))}
	f.base = service.Base{Now: f.clock.Now, Logger: quiet}
	f.db = dbtest.Pool(t)
	f.w = f.writer(t, f.db)
	t.Cleanup(func() { dbtest.Audit(t, f.db) })
	return f
}

func (f *fixture) writer(t *testing.T, db *pgxpool.Pool) *commands.Writer {
	t.Helper()
	w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: f.base, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// source creates a source of the kind with the configuration and returns
// it as stored.
func (f *fixture) source(t *testing.T, name, kind string, config any) lifecycle.Source {
	t.Helper()
	raw, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.w.CreateSource(f.ctx, lifecycle.Source{Name: name, Kind: kind, Enabled: true, Config: raw}, admin)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// messages are the messages of the source, oldest first.
func (f *fixture) messages(t *testing.T, source string) []*projection.Message {
	t.Helper()
	rows, err := f.db.Query(f.ctx, `SELECT id FROM messages WHERE source = $1 ORDER BY created_at, id`, source)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*projection.Message
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		m, err := projection.Load(f.ctx, f.db, id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// payload reads a message's body.
func (f *fixture) payload(t *testing.T, m *projection.Message) string {
	t.Helper()
	var body []byte
	if err := f.db.QueryRow(f.ctx, `SELECT body FROM payloads WHERE message_id = $1`, m.ID).Scan(&body); err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// dirSource creates a directory source on a new temporary directory and
// returns its poller.
func (f *fixture) dirSource(t *testing.T, name string, config map[string]any) *directory {
	t.Helper()
	cfg := map[string]any{"dir": t.TempDir(), "from": "acme", "to": "globex"}
	for k, v := range config {
		cfg[k] = v
	}
	s := f.source(t, name, sources.KindDirectory, cfg)
	dc, err := sources.Directory(s)
	if err != nil {
		t.Fatal(err)
	}
	return newDirectory(name, dc, f.w, f.base, lifecycle.DefaultMaxPayload)
}

// again is a new poller of the same directory source, as a process
// started after a crash makes it: nothing of the old one's memory.
func (f *fixture) again(d *directory) *directory {
	return newDirectory(d.name, d.cfg, d.w, f.base, d.maxPayload)
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// files lists the names in a directory, "" for none.
func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
