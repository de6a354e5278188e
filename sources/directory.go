package sources

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// What a directory source does with a file once its message is stored.
const (
	AfterMove   = "move"
	AfterDelete = "delete"
)

// The folders a directory source keeps inside its directory: files being
// taken, and files that could not be.
const (
	ProcessingFolder = ".processing"
	ErrorFolder      = "error"
	doneFolder       = "done"
)

// DirectoryConfig is the configuration of a directory source.
type DirectoryConfig struct {
	// Dir is the directory files are dropped in: an absolute path.
	// Required.
	Dir string `json:"dir"`
	// Pattern selects the files taken, as filepath.Match reads it, against
	// the file's name. Default "*". Names starting with a dot are never
	// taken: writers use them for files not yet whole.
	Pattern string `json:"pattern"`
	// From and To are the parties of every message. Required.
	From string `json:"from"`
	To   string `json:"to"`
	// ContentType is the messages' content type. Default
	// application/octet-stream.
	ContentType string `json:"content_type"`
	// Type and Headers are every message's type and headers, for routes
	// to match and targets to forward; none by default.
	Type    string            `json:"type,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Interval is the time between two looks at the directory. Default 2 s.
	Interval lifecycle.Duration `json:"interval"`
	// Settle is how long a file's size and modification time must stay the
	// same before it is taken. Default 2 s.
	Settle lifecycle.Duration `json:"settle"`
	// After is what becomes of a file once its message is stored: move (to
	// DoneDir) or delete. Default move.
	After string `json:"after"`
	// DoneDir is where files are moved after their message is stored.
	// Default <dir>/done; only with after move.
	DoneDir string `json:"done_dir,omitempty"`
}

var afterValues = []string{AfterMove, AfterDelete}

func (c *DirectoryConfig) check(string) error {
	var errs []error
	if !filepath.IsAbs(c.Dir) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.dir", Problem: fmt.Sprintf("%q is not an absolute path", c.Dir)})
	} else {
		c.Dir = filepath.Clean(c.Dir)
	}
	if c.Pattern == "" {
		c.Pattern = "*"
	}
	if _, err := filepath.Match(c.Pattern, ""); err != nil || strings.ContainsRune(c.Pattern, filepath.Separator) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.pattern",
			Problem: fmt.Sprintf("%q is not a pattern of file names, such as *.xml", c.Pattern)})
	}
	errs = append(errs, lifecycle.CheckParty("config.from", c.From), lifecycle.CheckParty("config.to", c.To),
		checkContentType(&c.ContentType), checkStamp(c.Type, &c.Headers),
		checkDuration("interval", &c.Interval, 2*time.Second, minInterval, maxInterval),
		checkDuration("settle", &c.Settle, 2*time.Second, time.Millisecond, time.Hour))
	if c.After == "" {
		c.After = AfterMove
	}
	switch {
	case !slices.Contains(afterValues, c.After):
		errs = append(errs, &lifecycle.FieldError{Field: "config.after",
			Problem: fmt.Sprintf("%q: allowed are %s", c.After, strings.Join(afterValues, ", "))})
	case c.After == AfterDelete:
		if c.DoneDir != "" {
			errs = append(errs, &lifecycle.FieldError{Field: "config.done_dir", Problem: "is only for after move"})
		}
	case c.DoneDir == "":
		if filepath.IsAbs(c.Dir) {
			c.DoneDir = filepath.Join(c.Dir, doneFolder)
		}
	case !filepath.IsAbs(c.DoneDir):
		errs = append(errs, &lifecycle.FieldError{Field: "config.done_dir", Problem: fmt.Sprintf("%q is not an absolute path", c.DoneDir)})
	default:
		c.DoneDir = filepath.Clean(c.DoneDir)
		switch rel, err := filepath.Rel(c.Dir, c.DoneDir); {
		case c.DoneDir == c.Dir:
			errs = append(errs, &lifecycle.FieldError{Field: "config.done_dir", Problem: "must not be dir itself: its files would be taken again"})
		case err == nil && inWorkFolder(rel):
			errs = append(errs, &lifecycle.FieldError{Field: "config.done_dir", Problem: fmt.Sprintf(
				"must not be dir's %s or %s folder, nor inside them: the source keeps the files it is taking and refusing there",
				ProcessingFolder, ErrorFolder)})
		}
	}
	return errors.Join(errs...)
}

// inWorkFolder reports whether a path relative to dir is the processing
// or the error folder or inside one.
func inWorkFolder(rel string) bool {
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	return first == ProcessingFolder || first == ErrorFolder
}

// Directory reads the configuration of a prepared directory source.
func Directory(s lifecycle.Source) (DirectoryConfig, error) {
	return read[DirectoryConfig](s, KindDirectory)
}
