// Package console is Waybill's web console for operators, served under
// /ui/ by `waybill serve`: the dashboard, the messages list, a message with
// its payload, deliveries and live history, the operator actions, targets
// and the lanes of a fifo target, routes and settings.
//
// Its pages are server-rendered from templates embedded in the binary, with
// htmx (vendored, pinned) for the parts that refresh themselves; nothing is
// fetched from elsewhere. Every page reads through the same functions as
// the REST API (projection.ListMessages, projection.ReadStats,
// projection.ListLanes, projection.Load, journal.Stream) and every action runs the same
// commands.Writer method, so the console and the API list, count and refuse
// alike; a refusal shows the API's words (httpapi.Refusal). An action on a
// message acts on the version its confirmation showed, or not at all.
//
// A browser signs in with an API token of any role; its session lives in
// the database (auth.Store.StartSession), so every server process knows
// it. The role bounds what the console shows and what it does, as it bounds
// the API: a reader sees no action and the server refuses one anyway.
// Every form carries the session's CSRF token. docs/ui.md describes it.
package console
