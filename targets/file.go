package targets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/waybill/waybill/lifecycle"
)

// fileConfig is the configuration of a file target.
type fileConfig struct {
	// Dir is the directory files are written to; an absolute path. Required.
	Dir string `json:"dir"`
	// Extension is the files' extension without the dot. Default "bin".
	Extension string `json:"extension"`
	// Overwrite lets an attempt replace a file of the same name with other
	// content; off, that fails the delivery.
	Overwrite bool `json:"overwrite"`
}

var extensionPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,16}$`)

func (c *fileConfig) validate() error {
	var errs []error
	if c.Dir == "" || !filepath.IsAbs(c.Dir) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.dir", Problem: "must be an absolute directory path"})
	}
	if c.Extension == "" {
		c.Extension = "bin"
	}
	if !extensionPattern.MatchString(c.Extension) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.extension", Problem: "must be 1 to 16 letters or digits, without the dot"})
	}
	return errors.Join(errs...)
}

// fileTarget writes each delivery's payload to a file of its own.
type fileTarget struct{ cfg fileConfig }

func newFile(t lifecycle.Target) (Deliverer, error) {
	var cfg fileConfig
	if err := decodeConfig(t.Config, &cfg); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &fileTarget{cfg: cfg}, nil
}

// Deliver writes <message id>-<seq>.<ext> through a temporary file and a
// rename, so a reader never sees half a file. A name already taken by
// exactly the payload's bytes is an earlier attempt's write and counts as
// done; taken by other bytes, the attempt fails unless overwrite is on.
func (f *fileTarget) Deliver(ctx context.Context, a Attempt) lifecycle.Outcome {
	name := filepath.Join(f.cfg.Dir, fmt.Sprintf("%s-%d.%s", a.MessageID, a.Seq, f.cfg.Extension))
	if err := ctx.Err(); err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("write %s: %v", name, err)}
	}
	existing, err := os.ReadFile(name)
	switch {
	case err == nil && bytes.Equal(existing, a.Payload):
		return lifecycle.Delivered("already written: " + name)
	case err == nil && !f.cfg.Overwrite:
		return lifecycle.Failed(fmt.Sprintf("%s exists with other content and overwrite is off", name))
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("read %s: %v", name, err)}
	}
	if err := writeFile(name, a.Payload); err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: err.Error()}
	}
	return lifecycle.Delivered("wrote " + name)
}

// writeFile writes data to name atomically: a temporary file in the same
// directory, synced, then renamed over name.
func writeFile(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
