package schema

import "github.com/waybill/waybill/lifecycle"

// alertsDDL is the alerts table, in the journal part: the alerts derive from
// the journal, but what was sent of them cannot be derived again, so a
// projection reset must keep it. One row per alert, keyed by the alert's
// stable id; a channel's sent_at column stays null until the channel took
// it. webhook says, when the alert was raised, whether it is owed to the
// webhook, so a webhook configured later does not receive the past.
var alertsDDL = `
CREATE TABLE IF NOT EXISTS alerts (
	id              text        PRIMARY KEY,
	code            text        NOT NULL,
	severity        text        NOT NULL,
	key             text        NOT NULL,
	position        bigint      NOT NULL,
	raised_at       timestamptz NOT NULL,
	body            jsonb       NOT NULL,
	webhook         boolean     NOT NULL,
	nats_sent_at    timestamptz,
	webhook_sent_at timestamptz
);
CREATE INDEX IF NOT EXISTS alerts_nats_pending ON alerts (position) WHERE nats_sent_at IS NULL;
CREATE INDEX IF NOT EXISTS alerts_webhook_pending ON alerts (position) WHERE webhook AND webhook_sent_at IS NULL;
-- Retention deletes the sent alerts oldest first.
CREATE INDEX IF NOT EXISTS alerts_raised ON alerts (raised_at);
-- The events that put a delivery in a state giving its message status
-- error: the alerter asks it whether a message it does not hold can have
-- turned into error, instead of reading the message's stream.
CREATE INDEX IF NOT EXISTS journal_failures ON journal (stream, version) WHERE ` + FailuresSQL + `;
`

// FailuresSQL selects the journal's events that put a delivery in a state
// giving its message status error (lifecycle.StatesGiving); it is the
// predicate of the journal_failures index, which a query finds by it.
var FailuresSQL = lifecycle.StatusesSQL("new_state", lifecycle.StatesGiving(lifecycle.StatusError))
