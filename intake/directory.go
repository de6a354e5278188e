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
//
// Whoever can drop a file can also put a symlink in place of a file or
// of a work folder, so the directory is worked on only through an
// os.Root of it, which no symlink leads out of; a work folder that is not
// a real folder, and a file that is not a regular one, are refused.
type directory struct {
	name       string
	cfg        sources.DirectoryConfig
	w          *commands.Writer
	now        func() time.Time
	log        *slog.Logger
	tracer     trace.Tracer
	maxPayload int64

	// doneIn is the done folder's path inside the directory, "" when it
	// is outside (an admin's folder, which files are copied to).
	doneIn string

	// seen holds, by name, each file waiting in the directory as last
	// looked at, and since when it has looked so.
	seen map[string]sighting

	// root and proc are the directory and its processing folder, open
	// during a poll.
	root, proc *os.Root

	// crash, set by tests, ends a poll at the named point as if the
	// process died there; rename is os.Root's, which tests replace to
	// make the move copy.
	crash  func(point string) bool
	rename func(root *os.Root, from, to string) error
}

// The modes of what a directory source makes (less the umask): its
// folders, and the files it writes (a copy, a reason). A message's
// content is no business of other users of the machine; its owner and
// its group, the sender's, read it.
const (
	folderMode os.FileMode = 0o750
	fileMode   os.FileMode = 0o640
)

type sighting struct {
	size  int64
	mtime time.Time
	since time.Time
}

// candidate is a settled file of the directory.
type candidate struct {
	name  string
	mtime time.Time
}

// errCrashed is what a poll returns when a test's crash point ends it.
var errCrashed = errors.New("crashed at a test's crash point")

func newDirectory(name string, cfg sources.DirectoryConfig, w *commands.Writer, base service.Base, maxPayload int64) *directory {
	doneIn, err := filepath.Rel(cfg.Dir, cfg.DoneDir)
	if err != nil || !filepath.IsLocal(doneIn) {
		doneIn = ""
	}
	return &directory{name: name, cfg: cfg, w: w, now: base.Now, log: base.Logger.With("source", name), tracer: base.Tracer,
		maxPayload: maxPayload, doneIn: doneIn, seen: map[string]sighting{}, rename: (*os.Root).Rename}
}

func (d *directory) resume(int64) {}

func (d *directory) close() {}

// poll looks at the files of the directory, then takes the files left in
// the processing folder and those that have settled, oldest first. The
// backlog is reported even when the processing folder cannot be used.
func (d *directory) poll(ctx context.Context) (report, error) {
	rep := report{owed: -1}
	root, err := os.OpenRoot(d.cfg.Dir)
	if err != nil {
		return rep, fmt.Errorf("directory %s: %w", d.cfg.Dir, err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return rep, fmt.Errorf("directory %s: %w", d.cfg.Dir, err)
	}
	now := d.now()
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
	proc, err := folder(root, sources.ProcessingFolder)
	if err == nil {
		d.root, d.proc = root, proc
		err = d.takeAll(ctx, settled, &rep)
		d.root, d.proc = nil, nil
		proc.Close()
	}
	rep.backlog = int64(len(d.seen))
	for _, s := range d.seen {
		rep.lag = max(rep.lag, now.Sub(s.since))
	}
	return rep, err
}

// takeAll takes the files left in the processing folder, then claims and
// takes the settled files. A file that cannot be moved on stays in the
// processing folder and the others are taken; only a message that cannot
// be stored ends the poll.
func (d *directory) takeAll(ctx context.Context, settled []candidate, rep *report) error {
	left, err := fs.ReadDir(d.proc.FS(), ".")
	if err != nil {
		return fmt.Errorf("work folder %s: %w", d.proc.Name(), err)
	}
	// Not only regular files: anything else came by the claim of a name
	// swapped after the listing, and take refuses it to the error folder.
	for _, e := range left {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := d.take(ctx, e.Name(), rep); err != nil {
			return err
		}
	}
	for _, c := range settled {
		if err := ctx.Err(); err != nil {
			return err
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
		if err := d.take(ctx, c.name, rep); err != nil {
			return err
		}
	}
	return nil
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
// A name swapped for a symlink since the listing is claimed as the
// symlink itself, which take refuses.
func (d *directory) claim(name string) error {
	to := filepath.Join(sources.ProcessingFolder, name)
	err := d.root.Link(name, to)
	switch {
	case err == nil:
		if err := d.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		return nil
	case errors.Is(err, fs.ErrExist), errors.Is(err, fs.ErrNotExist):
		return err
	}
	if _, err := d.root.Lstat(to); err == nil {
		return fs.ErrExist
	}
	if err := d.rename(d.root, name, to); err != nil {
		return fmt.Errorf("claim %s: %w", name, err)
	}
	return nil
}

// take stores the message of a file in the processing folder and then
// moves the file on. A file that cannot be read or is too large goes to
// the error folder; a message that could not be stored leaves the file
// where it is, for the next poll, and ends this one. A file whose message
// is stored but that cannot be moved on stays for the next poll too, and
// is reported.
func (d *directory) take(ctx context.Context, name string, rep *report) error {
	data, info, err := d.read(name)
	if err != nil {
		d.fail(name, err.Error(), rep)
		return nil
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
		d.fail(name, err.Error(), rep)
		return nil
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
	switch err := d.finish(name, m.ID, data, info.ModTime()); {
	case errors.Is(err, errCrashed):
		return err
	case err != nil:
		rep.failed++
		rep.problem = err.Error()
		d.log.Warn("file stored, left in the processing folder", "file", name, "message_id", m.ID, "err", err)
	}
	return nil
}

// read reads a claimed file. The error says why it is refused.
func (d *directory) read(name string) ([]byte, fs.FileInfo, error) {
	f, info, err := openRegular(d.proc, name)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot be read: %w", err)
	}
	defer f.Close()
	if info.Size() > d.maxPayload {
		return nil, nil, fmt.Errorf("is %d bytes, over the limit of %d", info.Size(), d.maxPayload)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot be read: %w", err)
	}
	return data, info, nil
}

// errNotRegular refuses a name that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// openRegular opens a regular file of root for reading: a symlink, even
// one to a file inside root, or anything else put in its place while it
// is opened, is refused.
func openRegular(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	held, err := root.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if !held.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s, %w", kind(held.Mode()), errNotRegular)
	}
	// Non-blocking, so that a fifo put in its place cannot hold the poll.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err == nil && !os.SameFile(held, info) {
		err = fmt.Errorf("replaced while being opened, %w", errNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// kind names what a directory entry is, for a refusal.
func kind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeSymlink != 0:
		return "a symlink"
	case mode.IsDir():
		return "a folder"
	case mode.IsRegular():
		return "a file"
	}
	return "a special file"
}

// folder opens the work folder at path inside root, making what is
// missing. Each folder on the way must be a real one: a symlink put in
// its place, even one to a folder inside root, would have the source
// list, read or write another folder as this one.
func folder(root *os.Root, path string) (*os.Root, error) {
	full := filepath.Join(root.Name(), path)
	var at string
	var info fs.FileInfo
	for name := range strings.SplitSeq(path, string(filepath.Separator)) {
		at = filepath.Join(at, name)
		if err := root.Mkdir(at, folderMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("work folder %s: %w", full, err)
		}
		var err error
		if info, err = root.Lstat(at); err != nil {
			return nil, fmt.Errorf("work folder %s: %w", full, err)
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("work folder %s is %s; it must be a folder, which the source makes when it is missing",
				filepath.Join(root.Name(), at), kind(info.Mode()))
		}
	}
	f, err := root.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("work folder %s: %w", full, err)
	}
	opened, err := f.Stat(".")
	if err == nil && !os.SameFile(info, opened) {
		err = errors.New("replaced while being opened")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("work folder %s: %w", full, err)
	}
	return f, nil
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
func (d *directory) finish(name string, message uuid.UUID, data []byte, mtime time.Time) error {
	if d.cfg.After == sources.AfterDelete {
		if err := d.proc.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		return nil
	}
	done, err := d.doneFolder()
	if err != nil {
		return fmt.Errorf("move %s: %w", name, err)
	}
	defer done.Close()
	// A done file of that name from another message stays: this one takes
	// the name with its message's id. One with this very content is this
	// file, moved by a run that crashed before it removed the original.
	for _, to := range []string{name, name + "." + message.String()} {
		f, _, err := openRegular(done, to)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := d.move(done, name, to, data, mtime); err != nil {
				return fmt.Errorf("move %s: %w", name, err)
			}
			return nil
		case errors.Is(err, errNotRegular):
			continue
		case err != nil:
			return fmt.Errorf("move %s: %w", name, err)
		}
		held, err := io.ReadAll(f)
		f.Close()
		switch {
		case err != nil:
			return fmt.Errorf("move %s: %w", name, err)
		case bytes.Equal(held, data):
			if err := d.proc.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("move %s: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("move %s: the done folder holds other files of its names", name)
}

// doneFolder opens the done folder, making it if missing: inside the
// directory a work folder like the others, outside it the admin's folder
// as its path says.
func (d *directory) doneFolder() (*os.Root, error) {
	if d.doneIn != "" {
		return folder(d.root, d.doneIn)
	}
	if err := os.MkdirAll(d.cfg.DoneDir, folderMode); err != nil {
		return nil, fmt.Errorf("done folder: %w", err)
	}
	done, err := os.OpenRoot(d.cfg.DoneDir)
	if err != nil {
		return nil, fmt.Errorf("done folder: %w", err)
	}
	return done, nil
}

// move moves a claimed file into the done folder as to. Inside the
// directory it is renamed, or copied when the done folder is on another
// file system. To a done folder outside it is always copied, from the
// content read already: a rename would go by the file's path under the
// directory, whose .processing a sender can swap for a symlink between a
// check and the rename.
func (d *directory) move(done *os.Root, name, to string, data []byte, mtime time.Time) error {
	if d.doneIn != "" {
		err := d.rename(d.root, filepath.Join(sources.ProcessingFolder, name), filepath.Join(d.doneIn, to))
		if !errors.Is(err, syscall.EXDEV) {
			return err
		}
	}
	if err := d.copyTo(done, to, data, mtime); err != nil {
		return err
	}
	if d.crashes("moved") {
		return errCrashed
	}
	if err := d.proc.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// copyTo writes a file's content into a folder as name: to a temporary
// name made there exclusively, synced, given the file's modification
// time, then renamed. A crash leaves at worst the temporary file, which
// the next copy of the name removes first.
func (d *directory) copyTo(to *os.Root, name string, data []byte, mtime time.Time) error {
	tmp := "." + name + ".tmp"
	if err := to.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := to.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = to.Chtimes(tmp, mtime, mtime)
	}
	if err != nil {
		return err
	}
	if d.crashes("copied") {
		return errCrashed
	}
	return to.Rename(tmp, name)
}

// fail moves a file that cannot be taken to the error folder, with the
// reason in a file beside it (<name>.reason), and counts it. A file the
// error folder cannot take stays in the processing folder for the next
// poll, and is reported.
func (d *directory) fail(name, reason string, rep *report) {
	rep.failed++
	rep.problem = name + ": " + reason
	if err := d.toErrorFolder(name, reason); err != nil {
		rep.problem += "; left in the processing folder: " + err.Error()
		d.log.Warn("file not taken, left in the processing folder", "file", name, "reason", reason, "err", err)
		return
	}
	d.log.Warn("file not taken: moved to the error folder", "file", name, "reason", reason)
}

// toErrorFolder moves a claimed file to the error folder under the first
// of name, name.1, name.2… free there, with its reason. The reason is
// made exclusively, so that nothing there, such as a symlink, is written
// through.
func (d *directory) toErrorFolder(name, reason string) error {
	errs, err := folder(d.root, sources.ErrorFolder)
	if err != nil {
		return err
	}
	defer errs.Close()
	dest := name
	var f *os.File
	for n := 1; ; n++ {
		if _, err = errs.Lstat(dest); errors.Is(err, fs.ErrNotExist) {
			if f, err = errs.OpenFile(dest+".reason", os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode); err == nil {
				break
			}
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("error folder: %w", err)
		}
		dest = name + "." + strconv.Itoa(n)
	}
	_, err = f.WriteString(reason + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.rename(d.root, filepath.Join(sources.ProcessingFolder, name), filepath.Join(sources.ErrorFolder, dest))
	}
	if err != nil {
		return fmt.Errorf("error folder: %w", err)
	}
	return nil
}

func (d *directory) crashes(point string) bool { return d.crash != nil && d.crash(point) }
