package schema

// keysDDL holds every signing key and the check value of the key they
// are sealed with, in the journal part: a key cannot be derived from the
// journal (which records only its id and fingerprint), so a projection
// reset and a rebuild keep them. target is the key's owner: a target's
// name, or one of the reserved owners of the callbacks' and the alert
// webhook's keys (@callbacks, @alerts), which no target name can be; so
// the reference to targets, which the first keys had, is dropped, and a
// target's deletion deletes its keys itself (targets/keys.go). The
// journal part is never migrated by its version, so every change here is
// additive and idempotent. secret is sealed with the server's secrets
// key (internal/seal), bound to the owner and the key id; public is an
// ed25519 key's public half, NULL for HMAC. expires_at is when a key
// stops signing (NULL: never).
// secrets_key_check holds one HMAC of a fixed label under the secrets
// key, so that a server holding another key refuses to start.
const keysDDL = `
CREATE TABLE IF NOT EXISTS target_keys (
	target      text        NOT NULL,
	key_id      text        NOT NULL,
	scheme      text        NOT NULL,
	secret      bytea       NOT NULL,
	public      bytea,
	fingerprint text        NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz,
	PRIMARY KEY (target, key_id)
);
ALTER TABLE target_keys DROP CONSTRAINT IF EXISTS target_keys_target_fkey;

CREATE TABLE IF NOT EXISTS secrets_key_check (
	singleton   bool  PRIMARY KEY DEFAULT true CHECK (singleton),
	check_value bytea NOT NULL
);
`
