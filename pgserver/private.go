package pgserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// PrivateDir makes dir private: mode 0700. When it is to hold a server's
// data directory (server) and the caller is root, so that the server runs
// as the postgres user, it is 0710 with that user's group instead: the
// server passes through it, no one else does. A missing dir is created
// (its parents 0755); an existing one of another mode or group is
// changed, and its mode before is returned so the caller can say so (0
// when it was created or already so).
func PrivateDir(dir string, server bool) (fs.FileMode, error) {
	mode, gid := fs.FileMode(0o700), -1
	if server {
		r, err := lookupRunAs()
		if err != nil {
			return 0, err
		}
		if r != nil {
			mode, gid = 0o710, int(r.gid)
		}
	}
	info, err := os.Stat(dir)
	created := errors.Is(err, fs.ErrNotExist)
	if created {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("create %s: %w", dir, err)
		}
		// MkdirAll's mode passes the umask; the one wanted is set below.
		info, err = os.Stat(dir)
	}
	if err != nil {
		return 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	if !info.IsDir() {
		return 0, fmt.Errorf("%s is not a directory", dir)
	}
	st, _ := info.Sys().(*syscall.Stat_t)
	if info.Mode().Perm() == mode && (gid < 0 || st == nil || int(st.Gid) == gid) {
		return 0, nil
	}
	if gid >= 0 {
		if err := os.Chown(dir, -1, gid); err != nil {
			return 0, fmt.Errorf("give %s to the group of %s: %w", dir, serverUserName, err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		return 0, fmt.Errorf("make %s private: %w", dir, err)
	}
	if created {
		return 0, nil
	}
	return info.Mode().Perm(), nil
}
