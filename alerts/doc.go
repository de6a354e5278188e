// Package alerts turns the journal into alerts and into a stream of events
// on NATS. Both are consumers of the feed, so what they send follows from
// committed events only, whichever process committed them.
//
// The Alerter raises the alerts Derive finds in each event, records each in
// the alerts table under a stable id (a redelivered event records nothing
// new), then sends every recorded alert once on NATS and, when configured,
// to a webhook, marking each channel done. A failed send is retried with
// back-off until it succeeds. A crash between a send and its mark repeats
// that send once, with the same id; docs/feed.md states the argument.
//
// The EventStream publishes every journal event on waybill.events.<kind>.
//
// Neither stops at what NATS refuses for its size: an event over the
// connection's max payload goes out without its payload, an alert with
// its texts cut (docs/feed.md).
package alerts
