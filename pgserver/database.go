package pgserver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates the database name on the started server unless
// it exists.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// LocalPID returns the PID of the postmaster of the server q is connected
// to, read from the postmaster.pid of its data directory: 0 when that
// cannot be read here, as when the server runs on another machine. The
// benchmarks measure the server's CPU through it.
func LocalPID(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) int {
	var dataDir string
	if q.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dataDir) != nil {
		return 0
	}
	pf, err := readPIDFile(dataDir)
	if err != nil {
		return 0
	}
	return pf.pid
}
