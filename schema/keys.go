package schema

// keysDDL holds the targets' signing keys and the check value of the key
// they are sealed with, in the journal part: a key cannot be derived from
// the journal (which records only its id and fingerprint), so a
// projection reset and a rebuild keep them. secret is sealed with the
// server's secrets key (internal/seal), bound to the target and the key
// id; public is an ed25519 key's public half, NULL for HMAC. A key goes
// with its target. expires_at is when a key stops signing (NULL: never).
// secrets_key_check holds one HMAC of a fixed label under the secrets
// key, so that a server holding another key refuses to start.
const keysDDL = `
CREATE TABLE IF NOT EXISTS target_keys (
	target      text        NOT NULL REFERENCES targets (name) ON DELETE CASCADE,
	key_id      text        NOT NULL,
	scheme      text        NOT NULL,
	secret      bytea       NOT NULL,
	public      bytea,
	fingerprint text        NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz,
	PRIMARY KEY (target, key_id)
);

CREATE TABLE IF NOT EXISTS secrets_key_check (
	singleton   bool  PRIMARY KEY DEFAULT true CHECK (singleton),
	check_value bytea NOT NULL
);
`
