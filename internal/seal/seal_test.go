package seal_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/seal"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// random makes a Box of a new random key.
func random(t *testing.T) *seal.Box {
	t.Helper()
	key := make([]byte, seal.KeySize)
	rand.Read(key)
	box, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

func TestSealOpens(t *testing.T) {
	box := random(t)
	sealed := box.Seal([]byte("whsec_secret"), []byte("alpha\x00key_1"))
	if bytes.Contains(sealed, []byte("secret")) {
		t.Fatal("the sealed value holds the plain text")
	}
	plain, err := box.Open(sealed, []byte("alpha\x00key_1"))
	if err != nil || string(plain) != "whsec_secret" {
		t.Fatalf("open: %q, %v", plain, err)
	}
	if _, err := box.Open(sealed, []byte("beta\x00key_1")); !errors.Is(err, seal.ErrKeyMismatch) {
		t.Fatalf("opened in another row's context: %v", err)
	}
	if _, err := random(t).Open(sealed, []byte("alpha\x00key_1")); !errors.Is(err, seal.ErrKeyMismatch) {
		t.Fatalf("opened with another key: %v", err)
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.key")
	if _, err := seal.LoadFile(path, false); err == nil {
		t.Fatal("a missing file was taken without create")
	}
	made, err := seal.LoadFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the key file's mode: %v, %v", info.Mode(), err)
	}
	again, err := seal.LoadFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := again.Open(made.Seal([]byte("x"), nil), nil); err != nil || string(plain) != "x" {
		t.Fatalf("the file read again holds another key: %v", err)
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := seal.LoadFile(path, true); err == nil {
		t.Fatal("a file of no key was taken")
	}
}

func TestCheckRefusesAnotherKey(t *testing.T) {
	db := dbtest.Pool(t)
	first := random(t)
	if err := first.Check(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if err := first.Check(t.Context(), db); err != nil {
		t.Fatalf("the same key checked again: %v", err)
	}
	if err := random(t).Check(t.Context(), db); !errors.Is(err, seal.ErrKeyMismatch) {
		t.Fatalf("another key: %v", err)
	}
}
