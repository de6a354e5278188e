package schema

// limitsDDL holds the token buckets of the targets with a rate
// (lifecycle.Rate): state of the moment, in the journal part so that no
// reset nor rebuild of the projections touches it, and never journaled;
// a target without a row has a full bucket. Only targets_admit writes it,
// as the claims take their tokens.
const limitsDDL = `
CREATE TABLE IF NOT EXISTS target_buckets (
	target text             PRIMARY KEY,
	tokens double precision NOT NULL,
	at     timestamptz      NOT NULL
);
`
