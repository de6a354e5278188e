package pgserver

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// serverUserName is the account the server runs as when we are root. It is
// the one Debian, Ubuntu and the official images create with the server
// packages.
const serverUserName = "postgres"

// runAs is the identity initdb and postgres run with. A nil *runAs means
// "as the calling user": no credential switch and no chown.
type runAs struct {
	uid, gid uint32
	groups   []uint32
}

// lookupRunAs returns the unprivileged identity to switch to when the
// process is root, and nil otherwise.
func lookupRunAs() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverUserName)
	if err != nil {
		return nil, fmt.Errorf("look up user %q to run postgres as (PostgreSQL refuses to run as root; create that user or run as a non-root user): %w", serverUserName, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of user %q: %w", serverUserName, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of user %q: %w", serverUserName, err)
	}
	r := &runAs{uid: uint32(uid), gid: uint32(gid)}
	// Keep the user's supplementary groups (e.g. ssl-cert on Debian):
	// without them the credential switch would clear them.
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("look up groups of user %q: %w", serverUserName, err)
	}
	for _, g := range gids {
		n, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("parse group id %q of user %q: %w", g, serverUserName, err)
		}
		r.groups = append(r.groups, uint32(n))
	}
	return r, nil
}

// sysProcAttr returns the process attributes for initdb and postgres: a
// new process group so a terminal ^C reaches only us (we then stop the
// server in order), SIGINT (fast shutdown) when our thread dies, and the
// credential switch when running as root. Go sets the parent-death signal
// after switching credentials, so the switch does not clear it.
func (r *runAs) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT}
	if r != nil {
		attr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: r.groups}
	}
	return attr
}

// chown hands path to the server user so the server can write it.
func (r *runAs) chown(path string) error {
	if r == nil {
		return nil
	}
	if err := os.Chown(path, int(r.uid), int(r.gid)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, serverUserName, err)
	}
	return nil
}

// checkTraversable fails when the server user cannot search some directory
// on the way to dir. We report it rather than loosen permissions on
// directories we did not create (a root-owned 0700 home or temp dir), so
// the caller decides.
func (r *runAs) checkTraversable(dir string) error {
	if r == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", dir, err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("stat %s: %w", d, err)
		}
		if !r.canSearch(fi) {
			return fmt.Errorf("directory %s is not searchable by user %q, which runs postgres: make it traversable (chmod o+x) or choose a data directory elsewhere", d, serverUserName)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// canSearch applies the kernel's owner/group/other execute-bit rule for the
// server user to a directory.
func (r *runAs) canSearch(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == r.uid:
		return perm&0o100 != 0
	case st.Gid == r.gid || slices.Contains(r.groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}
