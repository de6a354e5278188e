// Package httpapi is Waybill's REST API under /api/v1: ingest, messages and
// their history, the operator actions, routes, targets, settings, statistics
// and the journal for auditors, with its OpenAPI document. It authenticates
// every call with a bearer token, checks the token's role, validates every
// input before anything is written and answers every error with one JSON
// envelope. docs/rest.md describes the API.
package httpapi
