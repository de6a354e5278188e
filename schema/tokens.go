package schema

// tokensDDL is the table of the API's bearer tokens, in the journal part:
// a token cannot be derived from anything, so a projection reset keeps it.
// id is the token's public part, the key it is found by; only the SHA-256
// of its secret part is stored. A name may hold several tokens. The roles
// are checked by the code, so a new role needs no change here. sources and
// targets are a token's scope (NULL: unbounded), expires_at its end (NULL:
// none), last_used_at the last use recorded, at most once a minute. They
// are added with ADD COLUMN IF NOT EXISTS, so a database made before them
// gets them at the next start without a new schema version: every token
// it holds is unscoped and does not expire, as before.
const tokensDDL = `
CREATE TABLE IF NOT EXISTS api_tokens (
	id            text        PRIMARY KEY,
	name          text        NOT NULL,
	role          text        NOT NULL,
	secret_sha256 bytea       NOT NULL CHECK (length(secret_sha256) = 32),
	created_at    timestamptz NOT NULL
);
ALTER TABLE api_tokens
	ADD COLUMN IF NOT EXISTS sources      text[],
	ADD COLUMN IF NOT EXISTS targets      text[],
	ADD COLUMN IF NOT EXISTS expires_at   timestamptz,
	ADD COLUMN IF NOT EXISTS last_used_at timestamptz;
CREATE INDEX IF NOT EXISTS api_tokens_role ON api_tokens (role);
CREATE INDEX IF NOT EXISTS api_tokens_name ON api_tokens (name);
`

// sessionsDDL is the table of the console's signed-in browsers, beside
// the tokens they signed in with, so that every server process sharing
// the database knows every session. id_sha256 is the SHA-256 of the
// session's secret, the cookie's value, which is not stored. A session
// copies its token's name and role; revoking the token deletes its
// sessions with it.
const sessionsDDL = `
CREATE TABLE IF NOT EXISTS console_sessions (
	id_sha256  bytea       PRIMARY KEY CHECK (length(id_sha256) = 32),
	token_id   text        NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
	name       text        NOT NULL,
	role       text        NOT NULL,
	csrf       text        NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_token ON console_sessions (token_id);
CREATE INDEX IF NOT EXISTS console_sessions_expires ON console_sessions (expires_at);
`
