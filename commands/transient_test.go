package commands_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// TestTransient: which failures can pass. Most errors are the real ones
// pgx returns, made here against the test server, a proxy to it, or a port
// nobody listens on; the server's codes that are hard to provoke are built.
func TestTransient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.targets(t, "alpha")
	ctx := b.ctx
	proxy := dbtest.NewProxy(t, b.db)

	connect := func(t *testing.T, connString string) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, connString)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	exec := func(db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, ctx context.Context, sql string) error {
		_, err := db.Exec(ctx, sql)
		return err
	}
	// withURL returns the test database's URL changed by f.
	withURL := func(t *testing.T, f func(u *url.URL)) string {
		u, err := url.Parse(b.db.Config().ConnString())
		if err != nil {
			t.Fatal(err)
		}
		f(u)
		return u.String()
	}

	cases := []struct {
		name string
		err  func(t *testing.T) error
		want bool
	}{
		{"nil", func(*testing.T) error { return nil }, false},
		{"connection refused", func(t *testing.T) error {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			_, err = pgx.Connect(ctx, withURL(t, func(u *url.URL) { u.Host = addr }))
			return err
		}, true},
		{"connection reset while connecting", func(t *testing.T) error {
			db := proxy.Pool(t)
			proxy.Cut()
			defer proxy.Restore()
			return db.Ping(ctx)
		}, true},
		{"connection lost in a session", func(t *testing.T) error {
			db := proxy.Pool(t)
			conn, err := db.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			proxy.Cut()
			defer proxy.Restore()
			return exec(conn, ctx, "SELECT 1")
		}, true},
		{"connection lost during a query", func(t *testing.T) error {
			db := proxy.Pool(t)
			done := make(chan error, 1)
			go func() { done <- exec(db, ctx, "SELECT pg_sleep(30) -- cut") }()
			defer proxy.Restore()
			testpoll.Until(t, "the query running", func() bool {
				var running bool
				err := b.db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
					WHERE query = 'SELECT pg_sleep(30) -- cut' AND state = 'active')`).Scan(&running)
				if err != nil {
					t.Fatal(err)
				}
				return running
			})
			proxy.Cut()
			return <-done
		}, true},
		{"the Writer's command through a lost connection", func(t *testing.T) error {
			w, err := commands.New(commands.Config{Secrets: dbtest.Secrets(), Base: service.Base{Now: b.clock.Now}, DB: proxy.Pool(t)})
			if err != nil {
				t.Fatal(err)
			}
			proxy.Cut()
			defer proxy.Restore()
			_, err = w.Complete(ctx, uuid.New(), uuid.New(), lifecycle.Delivered("200"))
			return err
		}, true},
		{"terminated by an administrator (57P01)", func(t *testing.T) error {
			conn := connect(t, b.db.Config().ConnString())
			if err := exec(b.db, ctx, fmt.Sprintf("SELECT pg_terminate_backend(%d)", conn.PgConn().PID())); err != nil {
				t.Fatal(err)
			}
			return exec(conn, ctx, "SELECT 1")
		}, true},
		{"connection closed by the driver", func(t *testing.T) error {
			conn, err := pgx.Connect(ctx, b.db.Config().ConnString())
			if err != nil {
				t.Fatal(err)
			}
			conn.Close(ctx)
			return exec(conn, ctx, "SELECT 1")
		}, true},
		{"query timeout", func(t *testing.T) error {
			qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return exec(b.db, qctx, "SELECT pg_sleep(10)")
		}, true},
		{"pool acquire timeout", func(t *testing.T) error {
			cfg := b.db.Config()
			cfg.MaxConns = 1
			db, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			held, err := db.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release()
			actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return exec(db, actx, "SELECT 1")
		}, true},
		{"server starting up (57P03)", func(*testing.T) error { return &pgconn.PgError{Code: "57P03"} }, true},
		{"server crashed (57P02)", func(*testing.T) error { return &pgconn.PgError{Code: "57P02"} }, true},
		{"connection failure (08006)", func(*testing.T) error {
			return fmt.Errorf("complete delivery: %w", &pgconn.PgError{Code: "08006"})
		}, true},
		{"too many connections (53300)", func(*testing.T) error { return &pgconn.PgError{Code: "53300"} }, true},
		{"serialization failure (40001)", func(*testing.T) error { return &pgconn.PgError{Code: "40001"} }, true},

		{"no such database (3D000)", func(t *testing.T) error {
			_, err := pgx.Connect(ctx, withURL(t, func(u *url.URL) { u.Path = "/waybill_no_such_database" }))
			return err
		}, false},
		{"syntax error (42601)", func(*testing.T) error { return exec(b.db, ctx, "SELEC 1") }, false},
		{"disk full (53100)", func(*testing.T) error { return &pgconn.PgError{Code: "53100"} }, false},
		{"cancelled", func(*testing.T) error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return exec(b.db, cctx, "SELECT 1")
		}, false},
		{"closed pool", func(t *testing.T) error {
			db, err := pgxpool.NewWithConfig(ctx, b.db.Config())
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			return exec(db, ctx, "SELECT 1")
		}, false},
		{"invalid outcome", func(*testing.T) error {
			_, err := b.w.Complete(ctx, uuid.New(), uuid.New(), lifecycle.Outcome{})
			return err
		}, false},
		{"no such delivery", func(*testing.T) error {
			_, err := b.w.Complete(ctx, uuid.New(), uuid.New(), lifecycle.Delivered("200"))
			return err
		}, false},
		{"claim lost", func(t *testing.T) error {
			d := b.ingest(t).Deliveries[0]
			if _, err := b.w.Claim(ctx, d.ID, time.Minute); err != nil {
				t.Fatal(err)
			}
			_, err := b.w.Complete(ctx, d.ID, uuid.New(), lifecycle.Delivered("200"))
			if !errors.Is(err, commands.ErrClaimLost) {
				t.Fatalf("complete with another token: %v", err)
			}
			return err
		}, false},
	}
	// Not parallel: the cases that cut the proxy must not overlap.
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.err(t)
			if c.want && err == nil {
				t.Fatal("no error")
			}
			if got := commands.Transient(err); got != c.want {
				t.Errorf("Transient(%v) = %v, want %v", err, got, c.want)
			}
		})
	}
}
