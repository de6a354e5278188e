package dbtest

import (
	"encoding/base64"
	"path/filepath"
	"testing"

	"github.com/waybill/waybill/internal/seal"
	"github.com/waybill/waybill/internal/securefile"
)

// secretsKey is the secrets key of every test: a key one test's Writer
// or server seals, another's opens.
var secretsKey = []byte("waybill-test-secrets-key-32bytes")

// Secrets is the Box of the tests' secrets key, for commands.Config.
func Secrets() *seal.Box {
	box, err := seal.New(secretsKey)
	if err != nil {
		panic(err) // the key has the size
	}
	return box
}

// SecretsKeyFile writes the tests' secrets key to a file of the test's
// own, for a server process's --secrets-key-file.
func SecretsKeyFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secrets.key")
	if err := securefile.Write(path, []byte(base64.StdEncoding.EncodeToString(secretsKey)+"\n")); err != nil {
		t.Fatal(err)
	}
	return path
}
