package pgserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// CreateOwnedDatabase makes the database name and a role of that name that
// owns it, unless they exist, and returns the database's URL as the role.
// The role may log in and owns its database, so it may create and change
// every table in it, but it is not a superuser and creates no database
// and no role: what connects through it cannot read the server's files,
// run programs on the machine or reach other databases. The superuser
// stays for this setup. The role's password is generated once and kept in
// the data directory (mode 0600), and set again at each call. A database
// made before by CreateDatabase, owned by the superuser, is given to the
// role with every table, sequence, view and routine of its public schema.
// Waybill's schema needs no extension, so none is created.
func (s *Server) CreateOwnedDatabase(ctx context.Context, name string) (string, error) {
	fail := func(err error) (string, error) { return "", fmt.Errorf("database %s owned by its role: %w", name, err) }
	password, err := s.inst.rolePassword(name)
	if err != nil {
		return fail(err)
	}
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fail(err)
	}
	defer conn.Close(context.Background())
	role, literal := pgx.Identifier{name}.Sanitize(), "'"+strings.ReplaceAll(password, "'", "''")+"'"
	var roleExists, dbExists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1),
		EXISTS (SELECT FROM pg_database WHERE datname = $1)`, name).Scan(&roleExists, &dbExists); err != nil {
		return fail(err)
	}
	verb := "CREATE"
	if roleExists {
		verb = "ALTER"
	}
	steps := []string{verb + ` ROLE ` + role + ` WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD ` + literal}
	if dbExists {
		steps = append(steps, `ALTER DATABASE `+role+` OWNER TO `+role)
	} else {
		steps = append(steps, `CREATE DATABASE `+role+` OWNER `+role)
	}
	for _, sql := range steps {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fail(err)
		}
	}
	if dbExists {
		if err := s.giveObjects(ctx, name); err != nil {
			return fail(err)
		}
	}
	return s.inst.url(name, url.UserPassword(name, password)), nil
}

// giveObjects gives the role name every object of the public schema of
// its database that another role owns: the tables first, which take their
// indexes and the sequences of their columns with them, then what is left.
func (s *Server) giveObjects(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.URL(name))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		`SELECT format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, $1::text) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND pg_get_userbyid(c.relowner) <> $1`,
		`SELECT format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, $1::text) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind IN ('S', 'v', 'm', 'f') AND pg_get_userbyid(c.relowner) <> $1`,
		`SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, $1::text) FROM pg_proc p
			JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> $1`,
	} {
		rows, err := conn.Query(ctx, q, name)
		if err != nil {
			return err
		}
		alters, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, sql := range alters {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return err
			}
		}
	}
	return nil
}

// rolePassword is the password of the role name, from its file in the
// data directory, made on first use.
func (s *instance) rolePassword(name string) (string, error) {
	path := filepath.Join(s.dataDir, "role-"+name+".password")
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the password of role %s: %w", name, err)
	}
	password := rand.Text()
	if err := os.WriteFile(path, []byte(password+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store the password of role %s: %w", name, err)
	}
	// Every file of the data directory is the server user's, as the
	// directory is: a base backup (pg_basebackup, for a standby) reads
	// them all as that user.
	dir, err := os.Stat(s.dataDir)
	if err != nil {
		return "", fmt.Errorf("store the password of role %s: %w", name, err)
	}
	if st, ok := dir.Sys().(*syscall.Stat_t); ok {
		if err := os.Chown(path, int(st.Uid), int(st.Gid)); err != nil {
			return "", fmt.Errorf("store the password of role %s: %w", name, err)
		}
	}
	return password, nil
}

// url is the URL of database on the server, as user.
func (s *instance) url(database string, user *url.Userinfo) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     user,
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}
