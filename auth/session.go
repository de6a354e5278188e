package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Session is a browser signed in to the web console with a token. It acts
// as the token's identity until it expires, is ended, or the token is
// revoked. Sessions live in the console_sessions table, so every server
// process sharing the database knows them.
type Session struct {
	Identity
	// CSRF is the value every form of the session must send back: a page
	// of another site cannot read it, so it cannot make a form that acts.
	CSRF string
	// Expires is when the session ends on its own.
	Expires time.Time
}

// A session's secret, the cookie's value, is 32 random bytes in lower-case
// hex; the table keeps its SHA-256. With 256 bits no guess can reach one.
const sessionSecretLen = 64

// foreignKeyViolation is PostgreSQL's error code for a row whose
// referenced row is gone.
const foreignKeyViolation = "23503"

// ErrScopedSession refuses a scoped token a session: the console shows
// every source and target, more than the token may read.
var ErrScopedSession = errors.New("a scoped token cannot sign in to the console, which shows every source and target: use it with the REST API")

// StartSession signs token in: it authenticates it as Authenticate does
// and opens a session for its identity that lasts until expires, or until
// the token expires if that is sooner. A scoped token is ErrScopedSession.
// It returns the session's secret, which is shown this once, and the
// session. Sessions expired by now are deleted on the way.
func (s *Store) StartSession(ctx context.Context, token string, now, expires time.Time) (string, Session, error) {
	id, err := s.Authenticate(ctx, token)
	if err != nil {
		return "", Session{}, err
	}
	if id.Scope != nil {
		return "", Session{}, ErrScopedSession
	}
	tokenID, _, _ := parse(token)
	row, err := s.row(ctx, tokenID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", Session{}, ErrUnauthorized
	}
	if err != nil {
		return "", Session{}, fmt.Errorf("start session: %w", err)
	}
	if row.expires != nil && row.expires.Before(expires) {
		expires = *row.expires
	}
	secret, err := randomHex(sessionSecretLen / 2)
	if err != nil {
		return "", Session{}, fmt.Errorf("start session: %w", err)
	}
	csrf, err := randomHex(32)
	if err != nil {
		return "", Session{}, fmt.Errorf("start session: %w", err)
	}
	sum := sha256.Sum256([]byte(secret))
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM console_sessions WHERE expires_at <= $1`, now)
	b.Queue(`INSERT INTO console_sessions (id_sha256, token_id, name, role, csrf, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, sum[:], tokenID, id.Name, string(id.Role), csrf, now, expires)
	err = s.db.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == foreignKeyViolation {
		// The token was revoked since the cached read that took it.
		return "", Session{}, ErrUnauthorized
	}
	if err != nil {
		return "", Session{}, fmt.Errorf("start session: %w", err)
	}
	return secret, Session{Identity: id, CSRF: csrf, Expires: expires}, nil
}

// Session returns the session of secret as it is at now. An unknown,
// ended or expired session, or anything that is not a secret, is
// ErrUnauthorized; other errors are the database's.
func (s *Store) Session(ctx context.Context, secret string, now time.Time) (Session, error) {
	if len(secret) != sessionSecretLen || !isLowerHex(secret) {
		return Session{}, ErrUnauthorized
	}
	sum := sha256.Sum256([]byte(secret))
	var (
		out  Session
		role string
	)
	err := s.db.QueryRow(ctx, `SELECT name, role, csrf, expires_at FROM console_sessions
		WHERE id_sha256 = $1 AND expires_at > $2`, sum[:], now).Scan(&out.Name, &role, &out.CSRF, &out.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrUnauthorized
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session: %w", err)
	}
	if out.Role, err = ParseRole(role); err != nil {
		// A role this build does not know grants nothing.
		return Session{}, ErrUnauthorized
	}
	return out, nil
}

// EndSession deletes the session of secret; an unknown one is no error.
func (s *Store) EndSession(ctx context.Context, secret string) error {
	sum := sha256.Sum256([]byte(secret))
	if _, err := s.db.Exec(ctx, `DELETE FROM console_sessions WHERE id_sha256 = $1`, sum[:]); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// randomHex is n random bytes in lower-case hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
