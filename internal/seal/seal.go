// Package seal encrypts the secrets Waybill keeps in its database (the
// targets' signing keys) with a key kept outside it, so that a dump of
// the database alone does not reveal them.
package seal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/internal/securefile"
)

// KeySize is the size of the key: AES-256.
const KeySize = 32

// ErrKeyMismatch says the key is not the one the database's secrets were
// sealed with.
var ErrKeyMismatch = errors.New("the secrets key is not the one this database's secrets were sealed with")

// Box seals and opens secrets with one key (AES-256-GCM).
type Box struct {
	aead cipher.AEAD
	// check is the HMAC of checkLabel under the key, which the database
	// keeps so that every server on it proves it holds the same key.
	check []byte
}

// checkLabel is what the check value is the HMAC of.
const checkLabel = "waybill secrets key check v1"

// New makes a Box of a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("a secrets key is %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(checkLabel))
	return &Box{aead: aead, check: mac.Sum(nil)}, nil
}

// LoadFile reads the key from path: the base64 of 32 bytes, on a line.
// A missing file is created with a new random key (mode 0600) when create
// is set.
func LoadFile(path string, create bool) (*Box, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		key := make([]byte, KeySize)
		rand.Read(key)
		text := base64.StdEncoding.EncodeToString(key)
		if err := securefile.Write(path, []byte(text+"\n")); err != nil {
			return nil, fmt.Errorf("create secrets key file %s: %w", path, err)
		}
		return New(key)
	}
	if err != nil {
		return nil, fmt.Errorf("read secrets key file: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("secrets key file %s must hold the base64 of %d bytes", path, KeySize)
	}
	return New(key)
}

// Seal encrypts plain, bound to context (such as the row it is stored
// in, so that a sealed value moved to another row does not open there).
// The result is the nonce followed by the ciphertext.
func (b *Box) Seal(plain, context []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(plain)+b.aead.Overhead())
	rand.Read(nonce)
	return b.aead.Seal(nonce, nonce, plain, context)
}

// Open decrypts what Seal returned for the same context.
func (b *Box) Open(sealed, context []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("open secret: too short")
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], context)
	if err != nil {
		return nil, fmt.Errorf("open secret: %w", ErrKeyMismatch)
	}
	return plain, nil
}

// Execer runs statements: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check holds the key to the database's check value (the table
// secrets_key_check): the first server to check records its own, and
// every later one must hold the same key, or ErrKeyMismatch.
func (b *Box) Check(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, `INSERT INTO secrets_key_check (singleton, check_value) VALUES (true, $1)
		ON CONFLICT (singleton) DO NOTHING`, b.check); err != nil {
		return fmt.Errorf("check secrets key: %w", err)
	}
	var stored []byte
	if err := db.QueryRow(ctx, `SELECT check_value FROM secrets_key_check`).Scan(&stored); err != nil {
		return fmt.Errorf("check secrets key: %w", err)
	}
	if !hmac.Equal(stored, b.check) {
		return ErrKeyMismatch
	}
	return nil
}
