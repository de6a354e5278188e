// Package journal is Waybill's append-only record: the closed catalogue of
// event kinds, their validating JSON, and the reads and writes of the
// journal table.
//
// Every transition of a message, of its deliveries and of the configuration
// is one event. Events are appended by the commands, in the transaction that
// also updates the projections, and are never changed: the schema refuses
// UPDATE, DELETE and TRUNCATE on the table.
//
// Each event belongs to a stream (a message, or the configuration) and has
// the stream's next version, unique per stream, so a writer that lost a race
// fails instead of forking the stream.
package journal
