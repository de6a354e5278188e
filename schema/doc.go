// Package schema creates Waybill's tables idempotently at every start and
// guards them: there are no migrations, so a stored schema version other than
// the code's stops the start and names the reset to run.
//
// The tables fall in two parts. The journal part (the journal itself, the
// payloads, the configuration tables, the alerts and the API tokens) is kept
// forever. The projection part (messages and deliveries) is derived from the
// journal, and can be dropped and rebuilt from it at any time.
package schema
