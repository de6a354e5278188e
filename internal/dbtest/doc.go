// Package dbtest gives tests a real PostgreSQL database of their own.
//
// A package's TestMain calls Main (or Run, when it has cleanup of its own
// to do after the tests), which connects to the server named by
// WAYBILL_TEST_DATABASE_URL or, when that is unset, starts a throwaway
// server with pgserver. Each test then calls URL for a fresh, empty
// database, or Pool for one with Waybill's schema (a copy of a template
// database the process makes once), dropped when the test ends, so tests
// can run in parallel, and test processes can share one server, without
// seeing each other's data.
package dbtest
