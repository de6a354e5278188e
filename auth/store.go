package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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
	scope      *Scope
	expires    *time.Time
	// used is the last use recorded in the table, as far as this store
	// knows: read with the row, moved when the store records one.
	used *time.Time
	read time.Time
}

// UseResolution is how often a token's last use is recorded: at most once
// per UseResolution per token and server, so a busy client costs no write
// per request.
const UseResolution = time.Minute

// NewStore returns the store of the tokens in db. now is the clock the
// cache's ages, the tokens' creation, expiry and last use are read from: a
// server's service.Base clock. Nil is time.Now.
func NewStore(db *pgxpool.Pool, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now, cache: map[string]tokenRow{}}
}

// Spec is what a new token is made of.
type Spec struct {
	Name string
	Role Role
	// Scope bounds the token (CheckScope says which roles take what);
	// nil for none.
	Scope *Scope
	// Lifetime, when more than zero, makes the token expire that long
	// after its creation.
	Lifetime time.Duration
}

// New makes a token as spec says and returns it with its description.
// The token is shown this once: only a hash of its secret is kept. A name
// may hold several tokens, of the same role or not, so an operator can
// replace a token without a gap. Bad input is a *lifecycle.FieldError
// naming the field (name, role, sources, targets, expires).
func (s *Store) New(ctx context.Context, spec Spec) (string, Token, error) {
	errs := []error{lifecycle.CheckName("name", spec.Name)}
	if _, err := ParseRole(string(spec.Role)); err != nil {
		errs = append(errs, &lifecycle.FieldError{Field: "role", Problem: err.Error()})
	} else {
		errs = append(errs, CheckScope(spec.Role, spec.Scope))
	}
	if spec.Lifetime < 0 {
		errs = append(errs, &lifecycle.FieldError{Field: "expires", Problem: "must be more than zero"})
	}
	if err := errors.Join(errs...); err != nil {
		return "", Token{}, err
	}
	// To the microsecond, as the row keeps it: the answer shows what a read
	// shows later.
	t := Token{Name: spec.Name, Role: spec.Role, CreatedAt: s.now().UTC().Truncate(time.Microsecond)}
	if spec.Scope != nil {
		t.Sources, t.Targets = spec.Scope.Sources, spec.Scope.Targets
	}
	if spec.Lifetime > 0 {
		at := t.CreatedAt.Add(spec.Lifetime)
		t.ExpiresAt = &at
	}
	token, err := create(ctx, s.db, t)
	if err != nil {
		return "", Token{}, err
	}
	t.ID = token[len(tokenPrefix) : len(tokenPrefix)+idLen]
	return token, t, nil
}

// Create makes an unscoped token with the name and role that does not
// expire, as New does.
func (s *Store) Create(ctx context.Context, name string, role Role) (string, error) {
	token, _, err := s.New(ctx, Spec{Name: name, Role: role})
	return token, err
}

// execer is what create needs of a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// create stores t, all but its ID, under a new id and secret and returns
// the token.
func create(ctx context.Context, db execer, t Token) (string, error) {
	var b [idBytes + secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("create token: %w", err)
	}
	id, secret := hex.EncodeToString(b[:idBytes]), b[idBytes:]
	sum := sha256.Sum256(secret)
	_, err := db.Exec(ctx, `INSERT INTO api_tokens (id, name, role, secret_sha256, created_at, sources, targets, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, id, t.Name, string(t.Role), sum[:], t.CreatedAt.UTC(), t.Sources, t.Targets, t.ExpiresAt)
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
	// Sources or Targets are its scope; both nil when it is unscoped.
	Sources []string
	Targets []string
	// ExpiresAt is when it stops working; nil when it does not expire.
	ExpiresAt *time.Time
	// LastUsedAt is its last use recorded, within UseResolution; nil
	// before the first.
	LastUsedAt *time.Time
}

// tokenColumns are the columns scanToken reads, in its order.
const tokenColumns = `id, name, role, created_at, sources, targets, expires_at, last_used_at`

func scanToken(row pgx.CollectableRow) (Token, error) {
	var t Token
	err := row.Scan(&t.ID, &t.Name, &t.Role, &t.CreatedAt, &t.Sources, &t.Targets, &t.ExpiresAt, &t.LastUsedAt)
	return t, err
}

// List returns every token, oldest first.
func (s *Store) List(ctx context.Context) ([]Token, error) {
	rows, err := s.db.Query(ctx, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	tokens, err := pgx.CollectRows(rows, scanToken)
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
	tokens, err := s.revoke(ctx, `id = $1`, id)
	if err != nil {
		return Token{}, fmt.Errorf("revoke token %s: %w", id, err)
	}
	return tokens[0], nil
}

// RevokeName deletes every token of the name and returns what they were;
// ErrNoToken when the name holds none. Like Revoke it never deletes the
// last admin token: then it deletes nothing.
func (s *Store) RevokeName(ctx context.Context, name string) ([]Token, error) {
	if err := lifecycle.CheckName("name", name); err != nil {
		return nil, err
	}
	tokens, err := s.revoke(ctx, `name = $1`, name)
	if err != nil {
		return nil, fmt.Errorf("revoke the tokens named %s: %w", name, err)
	}
	return tokens, nil
}

// liveAdminSQL tells whether an admin token ($1 the role) works at $2: an
// expired one opens nothing, so it does not count as the last.
const liveAdminSQL = `SELECT EXISTS (SELECT FROM api_tokens WHERE role = $1 AND (expires_at IS NULL OR expires_at > $2))`

// revoke deletes the tokens where is true of (with the argument arg), in
// one transaction that is undone should no admin token be left.
func (s *Store) revoke(ctx context.Context, where string, arg string) ([]Token, error) {
	var tokens []Token
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// The admin lock makes two revocations of the last two admin
		// tokens take turns, so one of them is refused.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schema.KeyAdminToken)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM api_tokens WHERE `+where+` RETURNING `+tokenColumns, arg)
		if err != nil {
			return err
		}
		if tokens, err = pgx.CollectRows(rows, scanToken); err != nil {
			return err
		}
		if len(tokens) == 0 {
			return ErrNoToken
		}
		if !slices.ContainsFunc(tokens, func(t Token) bool { return t.Role == RoleAdmin }) {
			return nil
		}
		var others bool
		if err := tx.QueryRow(ctx, liveAdminSQL, string(RoleAdmin), s.now()).Scan(&others); err != nil {
			return err
		}
		if !others {
			return ErrLastAdmin
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	for _, t := range tokens {
		delete(s.cache, t.ID)
	}
	s.mu.Unlock()
	return tokens, nil
}

// Authenticate returns the identity of token. Anything but a token of the
// store, as New returned it and not expired, is ErrUnauthorized, whatever
// part of it is wrong; other errors are the database's. It records the
// token's use, once per UseResolution.
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
	now := s.now()
	if row.expires != nil && !now.Before(*row.expires) {
		return Identity{}, fmt.Errorf("%w: the token expired at %s", ErrUnauthorized, row.expires.UTC().Format(time.RFC3339))
	}
	if err := s.used(ctx, id, row, now); err != nil {
		return Identity{}, fmt.Errorf("authenticate: %w", err)
	}
	return Identity{Name: row.name, Role: r, Scope: row.scope}, nil
}

// used records the use of the token at now unless its last use recorded
// is within UseResolution: the write is conditional too, so servers that
// share the table write once a minute between them, give or take.
func (s *Store) used(ctx context.Context, id string, row tokenRow, now time.Time) error {
	if row.used != nil && now.Sub(*row.used) < UseResolution {
		return nil
	}
	_, err := s.db.Exec(ctx, `UPDATE api_tokens SET last_used_at = $2
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $3)`, id, now.UTC(), now.Add(-UseResolution).UTC())
	if err != nil {
		return fmt.Errorf("record the use of token %s: %w", id, err)
	}
	s.mu.Lock()
	if cached, ok := s.cache[id]; ok {
		cached.used = &now
		s.cache[id] = cached
	}
	s.mu.Unlock()
	return nil
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
	var sources, targets []string
	err := s.db.QueryRow(ctx, `SELECT name, role, secret_sha256, sources, targets, expires_at, last_used_at
		FROM api_tokens WHERE id = $1`, id).
		Scan(&row.name, &row.role, &row.stored, &sources, &targets, &row.expires, &row.used)
	if err != nil {
		return tokenRow{}, err
	}
	if sources != nil || targets != nil {
		row.scope = &Scope{Sources: sources, Targets: targets}
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
// holds no admin token that works (none, or only expired ones), it
// creates one named "admin" and writes it to path (the server's <data
// dir>/admin.token), readable only by the owner, and reports true. When a
// working admin token exists it does nothing,
// even if the file is gone: the token in it cannot be shown again, and
// `waybill token create` makes another. Servers starting together on one
// database create one token between them.
func (s *Store) EnsureAdminToken(ctx context.Context, path string) (created bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schema.KeyAdminToken)); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, liveAdminSQL, string(RoleAdmin), s.now()).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		token, err := create(ctx, tx, Token{Name: AdminName, Role: RoleAdmin, CreatedAt: s.now()})
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
