// Package sources holds the kinds of source, the places messages come in
// from on their own: a directory files are dropped in (`directory`), a
// table of another PostgreSQL database an upstream system writes rows to
// (`inbox_table`). Prepare fills a source's defaults and checks its whole
// configuration, each problem a field error; Directory and Inbox read a
// prepared source's configuration for the runtime that polls it (package
// intake). It imports nothing of Waybill but lifecycle and targets' reader
// of configurations, so the commands can prepare a source as they prepare
// a target. See docs/sources.md.
package sources
