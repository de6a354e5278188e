package intake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sources"
)

// directory takes the files dropped in a directory. A file is taken once
// its size and modification time have stayed the same for settle: it is
// claimed by moving it into the processing folder (an atomic link and
// unlink, so no two claims take one file), its message is stored and
// dispatched in one transaction under an idempotency key made of the
// file's identity, and only then is the file moved to the done folder or
// deleted. Whatever the processing folder holds at a poll is taken again
// first, so a crash at any point loses no file, and a file taken twice is
// found stored already by its key: it makes one message.
type directory struct {
	name       string
	cfg        sources.DirectoryConfig
	w          *commands.Writer
	now        func() time.Time
	log        *slog.Logger
	tracer     trace.Tracer
	maxPayload int64

	// seen holds, by name, each file waiting in the directory as last
	// looked at, and since when it has looked so.
	seen map[string]sighting

	// crash, set by tests, ends a poll at the named point as if the
	// process died there; rename is os.Rename, which tests replace to
	// make the move copy.
	crash  func(point string) bool
	rename func(from, to string) error
}

// The modes of what a directory source makes (less the umask): its
// folders, and the files it writes (a copy to another file system, a
// reason). A message's content is no business of other users of the
// machine; its owner and its group, the sender's, read it.
const (
	folderMode os.FileMode = 0o750
	fileMode   os.FileMode = 0o640
)

type sighting struct {
	size  int64
	mtime time.Time
	since time.Time
}

// errCrashed is what a poll returns when a test's crash point ends it.
var errCrashed = errors.New("crashed at a test's crash point")

func newDirectory(name string, cfg sources.DirectoryConfig, w *commands.Writer, base service.Base, maxPayload int64) *directory {
	return &directory{name: name, cfg: cfg, w: w, now: base.Now, log: base.Logger.With("source", name), tracer: base.Tracer,
		maxPayload: maxPayload, seen: map[string]sighting{}, rename: os.Rename}
}

func (d *directory) resume(int64) {}

func (d *directory) close() {}

func (d *directory) processing() string { return filepath.Join(d.cfg.Dir, sources.ProcessingFolder) }

// poll takes the files left in the processing folder, then the files of
// the directory that have settled, oldest first.
func (d *directory) poll(ctx context.Context) (report, error) {
	rep := report{owed: -1}
	if err := os.MkdirAll(d.processing(), folderMode); err != nil {
		return rep, fmt.Errorf("directory %s: %w", d.cfg.Dir, err)
	}
	left, err := os.ReadDir(d.processing())
	if err != nil {
		return rep, fmt.Errorf("directory %s: %w", d.cfg.Dir, err)
	}
	for _, e := range left {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := d.take(ctx, e.Name(), &rep); err != nil {
			return rep, err
		}
	}
	entries, err := os.ReadDir(d.cfg.Dir)
	if err != nil {
		return rep, fmt.Errorf("directory %s: %w", d.cfg.Dir, err)
	}
	now := d.now()
	type candidate struct {
		name  string
		mtime time.Time
	}
	var settled []candidate
	present := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !takes(d.cfg.Pattern, name) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		present[name] = true
		s, ok := d.seen[name]
		if !ok || s.size != info.Size() || !s.mtime.Equal(info.ModTime()) {
			s = sighting{size: info.Size(), mtime: info.ModTime(), since: now}
			d.seen[name] = s
		}
		if now.Sub(s.since) >= d.cfg.Settle.D() {
			settled = append(settled, candidate{name, s.mtime})
		}
	}
	for name := range d.seen {
		if !present[name] {
			delete(d.seen, name)
		}
	}
	slices.SortFunc(settled, func(a, b candidate) int {
		if c := a.mtime.Compare(b.mtime); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, c := range settled {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		switch err := d.claim(c.name); {
		case errors.Is(err, fs.ErrExist):
			continue // a file of that name is being taken: this one waits
		case errors.Is(err, fs.ErrNotExist):
			delete(d.seen, c.name)
			continue
		case err != nil:
			rep.failed++
			rep.problem = err.Error()
			continue
		}
		delete(d.seen, c.name)
		if err := d.take(ctx, c.name, &rep); err != nil {
			return rep, err
		}
	}
	rep.backlog = int64(len(d.seen))
	for _, s := range d.seen {
		rep.lag = max(rep.lag, now.Sub(s.since))
	}
	return rep, nil
}

// takes reports whether the poller takes a file of the directory by its
// name: one the pattern matches, not hidden (its own .processing folder,
// and the dot files writers often fill before they rename them).
func takes(pattern, name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ok, _ := filepath.Match(pattern, name)
	return ok
}

// claim moves a file of the directory into the processing folder: a hard
// link, which fails when the name is taken there, then the removal of the
// original. A crash between the two leaves the file in both places; the
// copy in the directory is then found stored already by its key. Where the
// file system has no hard links, the file is renamed if the name is free.
func (d *directory) claim(name string) error {
	from, to := filepath.Join(d.cfg.Dir, name), filepath.Join(d.processing(), name)
	err := os.Link(from, to)
	switch {
	case err == nil:
		if err := os.Remove(from); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		return nil
	case errors.Is(err, fs.ErrExist), errors.Is(err, fs.ErrNotExist):
		return err
	}
	if _, err := os.Lstat(to); err == nil {
		return fs.ErrExist
	}
	if err := d.rename(from, to); err != nil {
		return fmt.Errorf("claim %s: %w", name, err)
	}
	return nil
}

// take stores the message of a file in the processing folder and then
// moves the file on. A file that cannot be read or is too large goes to
// the error folder; a message that could not be stored leaves the file
// where it is, for the next poll, and ends this one.
func (d *directory) take(ctx context.Context, name string, rep *report) error {
	path := filepath.Join(d.processing(), name)
	info, err := os.Stat(path)
	if err != nil {
		return d.fail(name, "cannot be read: "+err.Error(), rep)
	}
	if info.Size() > d.maxPayload {
		return d.fail(name, fmt.Sprintf("is %d bytes, over the limit of %d", info.Size(), d.maxPayload), rep)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return d.fail(name, "cannot be read: "+err.Error(), rep)
	}
	if d.crashes("claimed") {
		return errCrashed
	}
	in := commands.NewMessage{Source: d.name, From: d.cfg.From, To: d.cfg.To, Type: d.cfg.Type, Headers: d.cfg.Headers,
		ContentType: d.cfg.ContentType, Payload: data, IdempotencyKey: FileKey(name, info.Size(), info.ModTime(), data)}
	traced, span := traceIngest(ctx, d.tracer, &in)
	m, created, err := d.w.Ingest(traced, in)
	endIngest(span, m, created, err)
	// A key held by a message with other content (another file of the
	// same identity cannot have it) is this file's refusal: taken, it
	// would be lost as a repeat.
	if errors.Is(err, commands.ErrInvalid) || errors.Is(err, commands.ErrIdempotencyConflict) {
		return d.fail(name, err.Error(), rep)
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", name, err)
	}
	if created {
		rep.taken++
		d.log.Debug("file taken", "file", name, "message_id", m.ID)
	}
	if d.crashes("stored") {
		return errCrashed
	}
	return d.finish(name, m.ID, data)
}

// FileKey is the idempotency key of a file: the SHA-256 of its name, size,
// modification time and content. A file taken twice (after a crash) has
// the same key; another file of the same name has another.
func FileKey(name string, size int64, mtime time.Time, data []byte) string {
	content := sha256.Sum256(data)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00", name, size, mtime.UnixNano())
	h.Write(content[:])
	return sources.FileKeyPrefix + hex.EncodeToString(h.Sum(nil))
}

// finish moves a file whose message is stored to the done folder, or
// deletes it.
func (d *directory) finish(name string, message uuid.UUID, data []byte) error {
	path := filepath.Join(d.processing(), name)
	if d.cfg.After == sources.AfterDelete {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		return nil
	}
	if err := os.MkdirAll(d.cfg.DoneDir, folderMode); err != nil {
		return fmt.Errorf("done folder: %w", err)
	}
	// A done file of that name from another message stays: this one takes
	// the name with its message's id. One with this very content is this
	// file, moved by a run that crashed before it removed the original.
	for _, to := range []string{name, name + "." + message.String()} {
		dest := filepath.Join(d.cfg.DoneDir, to)
		switch held, err := os.ReadFile(dest); {
		case err == nil && bytes.Equal(held, data):
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("move %s: %w", name, err)
			}
			return nil
		case err == nil:
			continue
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("move %s: %w", name, err)
		}
		return d.move(path, dest)
	}
	return fmt.Errorf("move %s: the done folder holds other files of its names", name)
}

// move renames a file, or copies it when the destination is on another
// file system: to a temporary name beside the destination, synced, then
// renamed, and only then is the original removed.
func (d *directory) move(from, to string) error {
	err := d.rename(from, to)
	if !errors.Is(err, syscall.EXDEV) {
		if err != nil {
			return fmt.Errorf("move %s: %w", filepath.Base(from), err)
		}
		return nil
	}
	tmp := filepath.Join(filepath.Dir(to), "."+filepath.Base(to)+".tmp")
	if err := copyFile(from, tmp); err != nil {
		return fmt.Errorf("move %s: %w", filepath.Base(from), err)
	}
	if d.crashes("copied") {
		return errCrashed
	}
	if err := os.Rename(tmp, to); err != nil {
		return fmt.Errorf("move %s: %w", filepath.Base(from), err)
	}
	if d.crashes("moved") {
		return errCrashed
	}
	if err := os.Remove(from); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move %s: %w", filepath.Base(from), err)
	}
	return nil
}

// copyFile writes a copy of from at to, synced, with from's modification
// time.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fileMode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Chtimes(to, info.ModTime(), info.ModTime())
}

// fail moves a file that cannot be taken to the error folder, with the
// reason in a file beside it (<name>.reason), and counts it.
func (d *directory) fail(name, reason string, rep *report) error {
	rep.failed++
	rep.problem = name + ": " + reason
	d.log.Warn("file not taken: moved to the error folder", "file", name, "reason", reason)
	dir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	if err := os.MkdirAll(dir, folderMode); err != nil {
		return fmt.Errorf("error folder: %w", err)
	}
	dest := filepath.Join(dir, name)
	for n := 1; ; n++ {
		if _, err := os.Lstat(dest); errors.Is(err, fs.ErrNotExist) {
			break
		}
		dest = filepath.Join(dir, name+"."+strconv.Itoa(n))
	}
	if err := os.WriteFile(dest+".reason", []byte(reason+"\n"), fileMode); err != nil {
		return fmt.Errorf("error folder: %w", err)
	}
	if err := d.move(filepath.Join(d.processing(), name), dest); err != nil {
		return err
	}
	return nil
}

func (d *directory) crashes(point string) bool { return d.crash != nil && d.crash(point) }
