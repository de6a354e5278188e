package pgserver

import (
	"strings"
	"testing"
)

// TestCreateDatabaseAndLocalPID: CreateDatabase makes a database once and
// leaves it be the second time; LocalPID, through a connection to it,
// finds the server's postmaster.
func TestCreateDatabaseAndLocalPID(t *testing.T) {
	t.Parallel()
	s := start(t, testDataDir(t))
	for range 2 {
		if err := s.CreateDatabase(t.Context(), "bench-db"); err != nil {
			t.Fatal(err)
		}
	}
	conn := connect(t, s.URL("bench-db"))
	if got := LocalPID(t.Context(), conn); got != s.inst.pid || got == 0 {
		t.Fatalf("LocalPID = %d, want %d", got, s.inst.pid)
	}
}

// TestCreateOwnedDatabase: the database's role owns it and may create in
// it, but is no superuser: it runs no program and creates no database. A
// database made before by CreateDatabase is given to the role with its
// objects; a second call changes nothing and the URL keeps working.
func TestCreateOwnedDatabase(t *testing.T) {
	t.Parallel()
	s := start(t, testDataDir(t))
	// A database of an earlier build: the superuser's, with its objects.
	if err := s.CreateDatabase(t.Context(), "waybill"); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, s.URL("waybill")).Exec(t.Context(), `CREATE TABLE old (id bigint GENERATED ALWAYS AS IDENTITY, v text);
		CREATE FUNCTION old_f() RETURNS int LANGUAGE sql AS 'SELECT 1'`); err != nil {
		t.Fatal(err)
	}
	var url string
	for range 2 {
		var err error
		if url, err = s.CreateOwnedDatabase(t.Context(), "waybill"); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(url, "postgres:"+s.inst.password) || !strings.HasPrefix(url, "postgres://waybill:") {
		t.Fatalf("URL %s is not the role's", url)
	}
	conn := connect(t, url)
	var super, createDB, createRole, owns bool
	if err := conn.QueryRow(t.Context(), `SELECT rolsuper, rolcreatedb, rolcreaterole,
		(SELECT datdba = r.oid FROM pg_database WHERE datname = current_database())
		FROM pg_roles r WHERE rolname = current_user`).Scan(&super, &createDB, &createRole, &owns); err != nil {
		t.Fatal(err)
	}
	if super || createDB || createRole || !owns {
		t.Errorf("the role: superuser %t, createdb %t, createrole %t, owns its database %t", super, createDB, createRole, owns)
	}
	// It changes what it owns, the objects given to it among them, and
	// creates anew; what only a superuser may do is refused.
	if _, err := conn.Exec(t.Context(), `ALTER TABLE old ADD COLUMN w text; INSERT INTO old (v) VALUES ('x');
		CREATE OR REPLACE FUNCTION old_f() RETURNS int LANGUAGE sql AS 'SELECT 2';
		CREATE TABLE fresh (id int PRIMARY KEY); CREATE INDEX ON old (v)`); err != nil {
		t.Errorf("the role cannot change its database: %v", err)
	}
	if _, err := conn.Exec(t.Context(), `COPY fresh FROM PROGRAM 'true'`); err == nil {
		t.Error("the role runs programs on the server")
	}
	if _, err := conn.Exec(t.Context(), `CREATE DATABASE other`); err == nil {
		t.Error("the role creates databases")
	}
}
