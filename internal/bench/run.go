package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/waybill/waybill/pgserver"
)

// Run runs the bench cfg asks for, the throughput run or, with
// cfg.Backlog, the drain of a backlog, and prints its report to stdout.
// Warnings, and the logs of a server in a process of its own, go to
// stderr.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Backlog > 0 {
		r, err := backlog(ctx, cfg, log, stderr)
		if err != nil {
			return err
		}
		r.print(stdout)
		return nil
	}
	r, err := throughput(ctx, cfg, log)
	if err != nil {
		return err
	}
	r.print(stdout)
	return nil
}

// startPostgres starts the bench's own PostgreSQL in dir, with settings as
// extra server settings, and returns the URL of its waybill database and
// the function that stops it.
func startPostgres(ctx context.Context, dir string, settings map[string]string, log *slog.Logger) (string, func(), error) {
	srv := pgserver.New(pgserver.Config{DataDir: filepath.Join(dir, "pg"), Logger: log, Settings: settings})
	err := srv.Start(ctx)
	if errors.Is(err, pgserver.ErrNoBinaries) {
		return "", nil, fmt.Errorf("no database: %w; install the PostgreSQL server binaries (initdb, postgres) or pass --database-url (env WAYBILL_DATABASE_URL)", err)
	}
	if err != nil {
		return "", nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Stop(ctx)
	}
	if err := srv.CreateDatabase(ctx, "waybill"); err != nil {
		stop()
		return "", nil, err
	}
	return srv.URL("waybill"), stop, nil
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(100 * time.Microsecond)
}

// freeListenAddr returns a loopback address with a port free just now.
func freeListenAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
