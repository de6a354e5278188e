package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/internal/securefile"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

// A token is "wb_<id>_<secret>": id is 8 random bytes and secret 32, both
// in lower-case hex. The id is the row's key, so a token is found without
// comparing secrets; the secret is known only to its holder, the table has
// its SHA-256. The secret has 256 bits of entropy, so a fast hash suffices:
// no guess or dictionary can reach it.
const (
	tokenPrefix = "wb_"
	idBytes     = 8
	secretBytes = 32
	idLen       = 2 * idBytes
	secretLen   = 2 * secretBytes
	tokenLen    = len(tokenPrefix) + idLen + 1 + secretLen
)

// AdminTokenFile is the name of the file, in the server's data directory,
// that the first start writes the admin token to.
const AdminTokenFile = "admin.token"

// AdminName is the name of the token EnsureAdminToken creates.
const AdminName = "admin"

// Store keeps the tokens in the api_tokens table, which schema.Ensure
// creates. It remembers the rows it has read for CacheTTL, so a client
// making many calls costs one lookup per CacheTTL, not one per call.
type Store struct {
	db  *pgxpool.Pool
	now func() time.Time

	mu    sync.Mutex
	cache map[string]tokenRow
}

// CacheTTL bounds how long a token row read from the table is used without
// reading it again: a token deleted from the table stops working within it.
const CacheTTL = 30 * time.Second

// maxCached bounds the remembered rows; when full, the cache starts over.
const maxCached = 1024

// tokenRow is a row of api_tokens as read at a time.
type tokenRow struct {
	name, role string
	stored     []byte
	read       time.Time
}

// NewStore returns the store of the tokens in db. now is the clock the
// cache's ages and the tokens' creation times are read from: a server's
// service.Base clock. Nil is time.Now.
func NewStore(db *pgxpool.Pool, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now, cache: map[string]tokenRow{}}
}

// Create makes a token with the name and role and returns it. The token is
// shown this once: only a hash of its secret is kept. A name may hold
// several tokens, of the same role or not, so an operator can replace a
// token without a gap. A bad name or role is a *lifecycle.FieldError
// naming the field.
func (s *Store) Create(ctx context.Context, name string, role Role) (string, error) {
	if err := checkInput(name, role); err != nil {
		return "", err
	}
	return create(ctx, s.db, name, role, s.now())
}

func checkInput(name string, role Role) error {
	if err := lifecycle.CheckName("name", name); err != nil {
		return err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return &lifecycle.FieldError{Field: "role", Problem: err.Error()}
	}
	return nil
}

// execer is what create needs of a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func create(ctx context.Context, db execer, name string, role Role, at time.Time) (string, error) {
	var b [idBytes + secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("create token: %w", err)
	}
	id, secret := hex.EncodeToString(b[:idBytes]), b[idBytes:]
	sum := sha256.Sum256(secret)
	_, err := db.Exec(ctx, `INSERT INTO api_tokens (id, name, role, secret_sha256, created_at)
		VALUES ($1, $2, $3, $4, $5)`, id, name, string(role), sum[:], at.UTC())
	if err != nil {
		return "", fmt.Errorf("create token: %w", err)
	}
	return tokenPrefix + id + "_" + hex.EncodeToString(secret), nil
}

// Token describes a stored token: never its secret, which is not kept.
type Token struct {
	// ID is the token's public part, the 16 hex digits after "wb_".
	ID        string
	Name      string
	Role      Role
	CreatedAt time.Time
}

// List returns every token, oldest first.
func (s *Store) List(ctx context.Context) ([]Token, error) {
	rows, err := s.db.Query(ctx, `SELECT id, name, role, created_at FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) {
		var t Token
		err := row.Scan(&t.ID, &t.Name, &t.Role, &t.CreatedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return tokens, nil
}

// ErrNoToken is Revoke's answer for an id the store does not hold.
var ErrNoToken = errors.New("no such token")

// ErrLastAdmin is Revoke's refusal of the only admin token: without one
// nobody could change the configuration until the next start made one.
var ErrLastAdmin = errors.New("it is the last admin token: create another admin token first")

// TokenID returns the id of s, a token's id or a whole token; anything
// else is a *lifecycle.FieldError.
func TokenID(s string) (string, error) {
	if id, _, ok := parse(s); ok {
		return id, nil
	}
	if len(s) != idLen || !isLowerHex(s) {
		return "", &lifecycle.FieldError{Field: "id",
			Problem: fmt.Sprintf("must be %d lower-case hex digits (the id `waybill token list` shows) or a whole token", idLen)}
	}
	return s, nil
}

// Revoke deletes the token with the id (as List gives it, or the whole
// token) and returns what it was. Servers that have used it stop taking it
// within CacheTTL.
func (s *Store) Revoke(ctx context.Context, id string) (Token, error) {
	id, err := TokenID(id)
	if err != nil {
		return Token{}, err
	}
	t := Token{ID: id}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// The admin lock makes two revocations of the last two admin
		// tokens take turns, so one of them is refused.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schema.KeyAdminToken)); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `DELETE FROM api_tokens WHERE id = $1 RETURNING name, role, created_at`, id).
			Scan(&t.Name, &t.Role, &t.CreatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoToken
		}
		if err != nil || t.Role != RoleAdmin {
			return err
		}
		var others bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM api_tokens WHERE role = $1)`, string(RoleAdmin)).Scan(&others); err != nil {
			return err
		}
		if !others {
			return ErrLastAdmin
		}
		return nil
	})
	if err != nil {
		return Token{}, fmt.Errorf("revoke token %s: %w", id, err)
	}
	s.mu.Lock()
	delete(s.cache, id)
	s.mu.Unlock()
	return t, nil
}

// Authenticate returns the identity of token. Anything but a token of the
// store, as Create returned it, is ErrUnauthorized, whatever part of it is
// wrong; other errors are the database's.
func (s *Store) Authenticate(ctx context.Context, token string) (Identity, error) {
	id, secret, ok := parse(token)
	if !ok {
		return Identity{}, ErrUnauthorized
	}
	row, err := s.row(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Identity{}, ErrUnauthorized
	}
	if err != nil {
		return Identity{}, fmt.Errorf("authenticate: %w", err)
	}
	sum := sha256.Sum256(secret)
	if subtle.ConstantTimeCompare(sum[:], row.stored) != 1 {
		return Identity{}, ErrUnauthorized
	}
	r, err := ParseRole(row.role)
	if err != nil {
		// A role this build does not know grants nothing.
		return Identity{}, ErrUnauthorized
	}
	return Identity{Name: row.name, Role: r}, nil
}

// row returns the token row with the id, from the cache while it is fresh.
// Only rows found are cached, so unknown ids cannot fill the cache.
func (s *Store) row(ctx context.Context, id string) (tokenRow, error) {
	now := s.now()
	s.mu.Lock()
	row, ok := s.cache[id]
	s.mu.Unlock()
	if ok && now.Sub(row.read) < CacheTTL {
		return row, nil
	}
	row = tokenRow{read: now}
	err := s.db.QueryRow(ctx, `SELECT name, role, secret_sha256 FROM api_tokens WHERE id = $1`, id).
		Scan(&row.name, &row.role, &row.stored)
	if err != nil {
		return tokenRow{}, err
	}
	s.mu.Lock()
	if len(s.cache) >= maxCached {
		clear(s.cache)
	}
	s.cache[id] = row
	s.mu.Unlock()
	return row, nil
}

// parse splits a token into its id and the bytes of its secret.
func parse(token string) (id string, secret []byte, ok bool) {
	if len(token) != tokenLen || !strings.HasPrefix(token, tokenPrefix) {
		return "", nil, false
	}
	rest := token[len(tokenPrefix):]
	id, hexSecret := rest[:idLen], rest[idLen+1:]
	if rest[idLen] != '_' || !isLowerHex(id) || !isLowerHex(hexSecret) {
		return "", nil, false
	}
	secret, err := hex.DecodeString(hexSecret)
	if err != nil {
		return "", nil, false
	}
	return id, secret, true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// EnsureAdminToken makes sure an admin can reach the API: when the store
// holds no admin token at all, it creates one named "admin" and writes it
// to path (the server's <data dir>/admin.token), readable only by the
// owner, and reports true. When an admin token exists it does nothing,
// even if the file is gone: the token in it cannot be shown again, and
// `waybill token create` makes another. Servers starting together on one
// database create one token between them.
func (s *Store) EnsureAdminToken(ctx context.Context, path string) (created bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schema.KeyAdminToken)); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM api_tokens WHERE role = $1)`, string(RoleAdmin)).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		token, err := create(ctx, tx, AdminName, RoleAdmin, s.now())
		if err != nil {
			return err
		}
		// Written before the commit: a token that could not be written
		// is not kept, and a commit that fails leaves a file the next
		// start overwrites.
		if err := securefile.Write(path, []byte(token+"\n")); err != nil {
			return err
		}
		created = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("ensure admin token: %w", err)
	}
	return created, nil
}
