package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FindBinDir returns a directory holding both the postgres and initdb
// binaries. It looks, in order, at PATH, at the output of `pg_config
// --bindir`, and at /usr/lib/postgresql/*/bin (highest major version first),
// the layout Debian and Ubuntu use, which is not on PATH by default.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		// Prefer the real directory over a symlink farm such as
		// /usr/local/bin, so the directory names one installation.
		if real, err := filepath.EvalSymlinks(p); err == nil && hasBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasBinaries(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}

	if dir := pgConfigBinDir(); dir != "" && hasBinaries(dir) {
		return dir, nil
	}

	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return majorVersion(b) - majorVersion(a)
	})
	for _, dir := range dirs {
		if hasBinaries(dir) {
			return dir, nil
		}
	}

	return "", fmt.Errorf("find postgres binaries: %w (searched PATH, pg_config --bindir, /usr/lib/postgresql/*/bin)", ErrNoBinaries)
}

// pgConfigBinDir returns what `pg_config --bindir` prints, or "" when
// pg_config is missing or fails.
func pgConfigBinDir() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// majorVersion parses the version directory of /usr/lib/postgresql/<v>/bin,
// giving -1 for names that are not numbers so they sort last.
func majorVersion(binDir string) int {
	v, err := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	if err != nil {
		return -1
	}
	return v
}

// hasBinaries reports whether dir holds executable postgres and initdb files.
func hasBinaries(dir string) bool {
	for _, name := range []string{"postgres", "initdb"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}
