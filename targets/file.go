package targets

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// fileConfig is the configuration of a file target.
type fileConfig struct {
	// Dir is the directory files are written to; an absolute path. Required.
	// It is not looked at until an attempt: a missing one is retried.
	Dir string `json:"dir"`
	// Extension is the files' extension without the dot. Default "bin".
	Extension string `json:"extension"`
	// Overwrite lets an attempt replace a file of the same name with other
	// content; off, that fails the delivery.
	Overwrite bool `json:"overwrite,omitempty"`
}

var extensionPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,16}$`)

func (c *fileConfig) check() error {
	var errs []error
	if !filepath.IsAbs(c.Dir) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.dir", Problem: fmt.Sprintf("%q is not an absolute directory path", c.Dir)})
	}
	if c.Extension == "" {
		c.Extension = "bin"
	}
	if !extensionPattern.MatchString(c.Extension) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.extension",
			Problem: fmt.Sprintf("%q: must be 1 to 16 letters or digits, without the dot", c.Extension)})
	}
	return errors.Join(errs...)
}

func checkFile(raw json.RawMessage) (json.RawMessage, error) {
	var cfg fileConfig
	if err := readConfig(raw, &cfg); err != nil {
		return nil, err
	}
	return json.Marshal(cfg)
}

// fileTarget writes each delivery's payload to a file of its own.
type fileTarget struct{ cfg fileConfig }

// newFile ignores the clock: a file target never asks for a time.
func newFile(t lifecycle.Target, _ []Key, _ func() time.Time) (Deliverer, error) {
	var cfg fileConfig
	if err := readConfig(t.Config, &cfg); err != nil {
		return nil, err
	}
	return &fileTarget{cfg: cfg}, nil
}

// Deliver writes <message id>-<seq>.<ext>. A name already taken by exactly
// the payload's bytes is an earlier attempt's write (one whose outcome was
// lost, or a redelivery) and counts as done; taken by other bytes, the
// attempt fails for good unless overwrite is on. A directory that is
// missing or cannot be written is a failure for now.
func (f *fileTarget) Deliver(ctx context.Context, a Attempt) lifecycle.Outcome {
	name := filepath.Join(f.cfg.Dir, fmt.Sprintf("%s-%d.%s", a.MessageID, a.Seq, f.cfg.Extension))
	if err := ctx.Err(); err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("write %s: %v", name, err)}
	}
	same, err := holds(name, a.Payload)
	switch {
	case err == nil && same:
		return lifecycle.Delivered("already written: " + name)
	case err == nil && !f.cfg.Overwrite:
		return lifecycle.Failed(name + " exists with other content and overwrite is off")
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("read %s: %v", name, err)}
	}
	if err := writeFile(name, a.Payload); err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: err.Error()}
	}
	return lifecycle.Delivered("wrote " + name)
}

// holds reports whether the file name holds exactly data; the error wraps
// fs.ErrNotExist when there is no such file.
func holds(name string, data []byte) (bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	// A file of another size cannot hold the payload, and is not read
	// whole to find that out.
	if !info.Mode().IsRegular() || info.Size() != int64(len(data)) {
		return false, nil
	}
	existing, err := io.ReadAll(f)
	if err != nil {
		return false, err
	}
	return bytes.Equal(existing, data), nil
}

// writeFile writes data to name so that a reader sees either no file or all
// of it: a temporary file in the same directory, synced and renamed over
// name; then the directory is synced, so that the file a delivered outcome
// speaks of survives a crash.
func writeFile(name string, data []byte) error {
	dir := filepath.Dir(name)
	// A dot name keeps the temporary file out of a reader's *.<ext>. Mode
	// 0666 less the umask, as for any file a program writes, where
	// os.CreateTemp's 0600 would shut out a reader running as another user.
	tmp := filepath.Join(dir, "."+filepath.Base(name)+"."+rand.Text()+".tmp")
	if err := writeNew(tmp, data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// writeNew creates the file name, which must not exist, and writes and
// syncs data to it; it leaves no file behind when that fails.
func writeNew(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = os.Remove(name)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
