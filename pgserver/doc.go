// Package pgserver runs a local PostgreSQL server from the machine's own
// server binaries (postgres and initdb), so waybill needs no external
// database service: the test harness starts throwaway servers with it, and
// `waybill serve` uses it as an embedded database whose data directory
// survives restarts.
//
// The server listens only on 127.0.0.1 and requires a password that is
// generated when the data directory is initialized and kept inside it.
// Waybill connects as a role that owns its database and is no superuser
// (CreateOwnedDatabase); the superuser serves only to set that up. When
// the calling process runs as root, the server runs as the unprivileged
// "postgres" system user, because PostgreSQL refuses to run as root.
package pgserver
