package schema

// tokensDDL is the table of the API's bearer tokens, in the journal part:
// a token cannot be derived from anything, so a projection reset keeps it.
// id is the token's public part, the key it is found by; only the SHA-256
// of its secret part is stored. A name may hold several tokens. The roles
// are checked by the code, so a new role needs no change here.
const tokensDDL = `
CREATE TABLE IF NOT EXISTS api_tokens (
	id            text        PRIMARY KEY,
	name          text        NOT NULL,
	role          text        NOT NULL,
	secret_sha256 bytea       NOT NULL CHECK (length(secret_sha256) = 32),
	created_at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS api_tokens_role ON api_tokens (role);
`
