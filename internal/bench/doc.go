// Package bench is the harness of `waybill bench`: it runs a whole Waybill
// against a local sink and measures it, either the throughput of ingest to
// delivered (Config.Messages) or the drain of a backlog (Config.Backlog),
// and prints a report (docs/performance.md).
//
// It is internal: only the waybill command uses it, and it changes with
// what the benchmarks measure, not as an API. The command gives it the
// server to measure (Config.Serve, Config.ServeCommand, Config.OpenDB), so
// the harness runs exactly what `waybill serve` runs without knowing its
// wiring. Its SQL of its own reads pg_stat_statements (statements.go),
// PostgreSQL's own statistics, which no package of Waybill owns, and
// writes the synthetic journal of the tests and benchmarks at scale
// (journal.go).
package bench
