// Package dirlock gives a data directory one owner at a time: the process
// that holds an OS file lock (flock) on a file in it. The kernel drops the
// lock when its holder dies, even by SIGKILL, so a lock is never stale: the
// file a killed owner left behind is taken over by the next one.
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// FileName is the lock file in the data directory. It holds the owner's
// Owner as JSON, for the refusal of the next process, and is never removed:
// removing it could let two processes lock two different files.
const FileName = "owner.lock"

// Owner says which process owns a data directory.
type Owner struct {
	// PID is the owner's process id.
	PID int `json:"pid"`
	// Command is the waybill command the owner runs: serve, audit, ….
	Command string `json:"command"`
	// URL is where a server owner answers, once it listens.
	URL string `json:"url,omitempty"`
}

// HeldError is the refusal of Acquire while another process owns the
// directory.
type HeldError struct {
	// Dir is the data directory, as the caller named it.
	Dir string
	// Owner is what the owner wrote in the lock file; zero when it has not
	// written it yet.
	Owner Owner
}

func (e *HeldError) Error() string {
	o := e.Owner
	if o.PID == 0 {
		return fmt.Sprintf("another waybill process uses %s", e.Dir)
	}
	details := []string{fmt.Sprintf("pid %d", o.PID)}
	if o.URL != "" {
		details = append(details, o.URL)
	}
	return fmt.Sprintf("another waybill %s (%s) uses %s", o.Command, strings.Join(details, ", "), e.Dir)
}

// Lock is the ownership of a data directory, held until Release or the
// process's end.
type Lock struct {
	f *os.File
}

// Acquire makes the calling process the owner of dir, an existing
// directory, and records owner in the lock file; it does not wait. While
// another process owns dir it returns a *HeldError naming that process, and
// changes nothing.
func Acquire(dir string, owner Owner) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the data directory's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			held := &HeldError{Dir: dir}
			if data, err := os.ReadFile(path); err == nil {
				// Unreadable content (being written) leaves the owner unnamed.
				_ = json.Unmarshal(data, &held.Owner)
			}
			return nil, held
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &Lock{f: f}
	if err := l.Record(owner); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// Record replaces what the lock file says of its owner: a server records
// its URL once it listens.
func (l *Lock) Record(owner Owner) error {
	data, err := json.Marshal(owner)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if _, err := l.f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("record the data directory's owner: %w", err)
	}
	if err := l.f.Truncate(int64(len(data))); err != nil {
		return fmt.Errorf("record the data directory's owner: %w", err)
	}
	return nil
}

// Release gives up the ownership. The lock file is emptied, not removed, so
// the next owner locks the same file.
func (l *Lock) Release() {
	_ = l.f.Truncate(0)
	_ = l.f.Close()
}
