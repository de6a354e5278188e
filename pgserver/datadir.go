package pgserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// superuser is the role initdb creates and URL connects as.
	superuser = "postgres"

	// passwordFileName holds the superuser password inside the data
	// directory, so a later Start on the same directory can connect.
	passwordFileName = "waybill.password"

	// logFileName is the server's stderr, kept so start failures can
	// show what the server said.
	logFileName = "server.log"
)

// prepareDataDir makes sure dataDir (absolute) exists and is initialized,
// and returns the superuser password stored in it.
func prepareDataDir(ctx context.Context, binDir, dataDir string, r *runAs) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return "", fmt.Errorf("create parent of data dir: %w", err)
	}
	if err := r.checkTraversable(filepath.Dir(dataDir)); err != nil {
		return "", err
	}

	entries, err := os.ReadDir(dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Create it ourselves rather than let initdb do it: as root the
		// server user may not be allowed to write the parent.
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			return "", fmt.Errorf("create data dir: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("read data dir: %w", err)
	case len(entries) > 0:
		pw, err := os.ReadFile(filepath.Join(dataDir, passwordFileName))
		if err != nil {
			return "", fmt.Errorf("read server password (was %s initialized by pgserver?): %w", dataDir, err)
		}
		return strings.TrimSpace(string(pw)), nil
	}

	if err := r.chown(dataDir); err != nil {
		return "", err
	}
	return initDataDir(ctx, binDir, dataDir, r)
}

// initDataDir runs initdb on the empty dataDir with a new random superuser
// password, which it stores in the data directory and returns.
func initDataDir(ctx context.Context, binDir, dataDir string, r *runAs) (string, error) {
	password := rand.Text()

	// initdb refuses a non-empty data directory, so the password file it
	// reads has to live outside it until initdb is done.
	if err := r.checkTraversable(os.TempDir()); err != nil {
		return "", err
	}
	pwFile, err := os.CreateTemp("", "pgserver-pwfile-*")
	if err != nil {
		return "", fmt.Errorf("create password file: %w", err)
	}
	defer os.Remove(pwFile.Name())
	_, err = pwFile.WriteString(password + "\n")
	if cerr := pwFile.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write password file: %w", err)
	}
	if err := r.chown(pwFile.Name()); err != nil {
		return "", err
	}

	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"--pgdata="+dataDir,
		"--username="+superuser,
		"--pwfile="+pwFile.Name(),
		"--encoding=UTF8",
		// The C locale exists everywhere and does not depend on the
		// caller's environment, so every data directory sorts alike.
		"--locale=C",
		"--auth-host=scram-sha-256",
		"--auth-local=scram-sha-256",
	)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// The server user may not be able to enter our working directory.
	cmd.Dir = "/"
	cmd.SysProcAttr = r.sysProcAttr()
	// On SIGINT initdb removes what it created; SIGKILL would leave a
	// half-initialized directory that the next Start cannot use.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("initdb %s: %w\n%s", dataDir, err, strings.TrimSpace(out.String()))
	}

	path := filepath.Join(dataDir, passwordFileName)
	if err := os.WriteFile(path, []byte(password+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store server password: %w", err)
	}
	if err := r.chown(path); err != nil {
		return "", err
	}
	return password, nil
}

// pidFile is what we use of postmaster.pid, the lock file a running server
// keeps in its data directory.
type pidFile struct {
	pid  int
	port int
}

// readPIDFile parses the postmaster.pid in dataDir: line 1 is the
// postmaster's PID and line 4 its port.
func readPIDFile(dataDir string) (pidFile, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return pidFile{}, err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return pidFile{}, fmt.Errorf("parse postmaster.pid: %d lines, want at least 4", len(lines))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return pidFile{}, fmt.Errorf("parse postmaster.pid pid: %w", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return pidFile{}, fmt.Errorf("parse postmaster.pid port: %w", err)
	}
	return pidFile{pid: pid, port: port}, nil
}

// processAlive reports whether pid names a process, including one we may
// not signal.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// logTail returns the last lines of the file at path, for error messages.
func logTail(path string) string {
	const maxBytes, maxLines = 8 << 10, 20
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		if _, err := f.Seek(-maxBytes, io.SeekEnd); err != nil {
			return ""
		}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}
