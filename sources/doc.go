// Package sources holds the kinds of source, the places messages come in
// from on their own: a directory files are dropped in (`directory`), a
// table of another PostgreSQL database an upstream system writes rows to
// (`inbox_table`), a sender's signed webhooks, posted without a token
// (`webhook`). Prepare fills a source's defaults and checks its whole
// configuration, each problem a field error; Directory and Inbox read a
// prepared source's configuration for the runtime that polls it (package
// intake), Webhook a webhook source's, whose Check verifies a request's
// signature for the API (package httpapi). It owns the sources' running state too, the tables
// source_state and inbox_markers: every statement on them is here
// (state.go), queued into a command's batch or run on a Querier. It
// imports nothing of Waybill but lifecycle, journal and targets' reader
// of configurations, so the commands can prepare a source as they prepare
// a target, and every package that reads or writes a source's state can
// import it. See docs/sources.md.
package sources
