package pgserver

import (
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestPrivateDir: a directory made or found is closed to others; one that
// is to hold the server's data as root lets the postgres user pass, and
// no one else.
func TestPrivateDir(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	serverMode, serverGid := fs.FileMode(0o700), -1
	if root {
		u, err := user.Lookup(serverUserName)
		if err != nil {
			t.Fatal(err)
		}
		serverMode, serverGid = 0o710, atoi(t, u.Gid)
	}
	for _, tc := range []struct {
		name     string
		existing fs.FileMode // 0: missing
		server   bool
		mode     fs.FileMode
		gid      int
	}{
		{"made", 0, false, 0o700, -1},
		{"made for the server", 0, true, serverMode, serverGid},
		{"open to others", 0o755, false, 0o700, -1},
		{"open to others, for the server", 0o775, true, serverMode, serverGid},
		{"private already", 0o700, false, 0o700, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "var")
			if tc.existing != 0 {
				if err := os.Mkdir(dir, tc.existing); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tc.existing); err != nil {
					t.Fatal(err)
				}
			}
			was, err := PrivateDir(dir, tc.server)
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.existing; tc.existing == tc.mode || tc.existing == 0 {
				if was != 0 {
					t.Errorf("reported the mode %v as changed", was)
				}
			} else if was != want {
				t.Errorf("reported the mode before as %v, want %v", was, want)
			}
			info, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != tc.mode {
				t.Errorf("mode %v, want %v", info.Mode().Perm(), tc.mode)
			}
			if gid := int(info.Sys().(*syscall.Stat_t).Gid); tc.gid >= 0 && gid != tc.gid {
				t.Errorf("group %d, want %d", gid, tc.gid)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
