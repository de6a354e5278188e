package securefile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/waybill/waybill/internal/securefile"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "var")
	path := filepath.Join(dir, "secret")
	for _, content := range []string{"first\n", "second\n"} {
		if err := securefile.Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v; want 0600", info.Mode(), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the directory holds %v (%v), want the file alone", entries, err)
	}
}
