// Package feed reads the journal for asynchronous consumers, such as the
// alerter and the event stream, each in its own consumer group.
//
// A group reads events in (transaction id, position) order, and only events
// of transactions older than every transaction still open. Positions are
// taken when a row is inserted, not when its transaction commits, so reading
// by position alone would pass over an event whose transaction committed
// after a higher position had been read; the order used here never does.
// docs/feed.md gives the rule, the lag and the limits in full.
//
// Each group keeps its place in the feed_offsets table, written by
// watermill-sql's PostgreSQL offsets adapter in the transaction that read
// the events. A handler error redelivers the event; a crash before the
// place is saved redelivers what was handled since, so handlers must be
// idempotent.
package feed
