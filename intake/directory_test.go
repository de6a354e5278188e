package intake

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/sources"
)

// TestDirectoryTakesSettledFiles: a file is taken once its size and time
// have stayed the same for settle, into a message of the source's parties
// and content type, and is then moved to the done folder; hidden files,
// folders and names the pattern does not match stay.
func TestDirectoryTakesSettledFiles(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"pattern": "*.xml", "content_type": "application/xml"})
	dir := d.cfg.Dir
	write(t, dir, "a.xml", "<a/>")
	write(t, dir, ".b.xml", "<b/>")
	write(t, dir, "c.txt", "c")
	if err := os.Mkdir(filepath.Join(dir, "d.xml"), 0o755); err != nil {
		t.Fatal(err)
	}

	rep, err := d.poll(f.ctx)
	if err != nil || rep.taken != 0 || rep.backlog != 1 {
		t.Fatalf("first look: %+v %v", rep, err)
	}
	f.clock.Advance(time.Second)
	write(t, dir, "a.xml", "<a>still being written</a>")
	if rep, err = d.poll(f.ctx); err != nil || rep.taken != 0 || rep.lag != 0 {
		t.Fatalf("changed: %+v %v", rep, err)
	}
	f.clock.Advance(time.Second)
	if rep, err = d.poll(f.ctx); err != nil || rep.taken != 0 || rep.lag != time.Second {
		t.Fatalf("not settled: %+v %v", rep, err)
	}
	f.clock.Advance(time.Second)
	if rep, err = d.poll(f.ctx); err != nil || rep.taken != 1 || rep.backlog != 0 {
		t.Fatalf("settled: %+v %v", rep, err)
	}
	ms := f.messages(t, "drop")
	if len(ms) != 1 {
		t.Fatalf("%d messages", len(ms))
	}
	m := ms[0]
	if m.From != "acme" || m.To != "globex" || m.ContentType != "application/xml" || f.payload(t, m) != "<a>still being written</a>" ||
		!strings.HasPrefix(m.IdempotencyKey, "file:") {
		t.Errorf("message %+v", m)
	}
	if got := files(t, dir); !slices.Equal(got, []string{".b.xml", sources.ProcessingFolder, "c.txt", "d.xml", "done"}) {
		t.Errorf("directory holds %v", got)
	}
	if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"a.xml"}) {
		t.Errorf("done holds %v", got)
	}
}

// TestDirectoryCrashWindows: a crash at every point of taking a file, the
// next process taking over from what is on disk and in the database,
// makes exactly one message of the file and leaves it once in the done
// folder: a crash after the claim, before the commit; after the commit,
// before the move; during a move that copies (another file system), after
// the copy and after the copy's rename.
func TestDirectoryCrashWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point string
		// how the file is moved: renamed, copied where the done folder
		// is on another file system, copied to a done folder outside
		// the directory
		how string
	}{{"claimed", "renaming"}, {"stored", "renaming"}, {"stored", "copying"}, {"copied", "copying"}, {"moved", "copying"},
		{"stored", "outside"}, {"copied", "outside"}, {"moved", "outside"}} {
		t.Run(tc.point+" "+tc.how, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			config := map[string]any{"settle": "1ms"}
			if tc.how == "outside" {
				config["done_dir"] = t.TempDir()
			}
			d := f.dirSource(t, "drop", config)
			write(t, d.cfg.Dir, "order.csv", "1;2;3")
			copying := func(r *os.Root, from, to string) error {
				if tc.how == "copying" && strings.HasPrefix(to, "done") {
					return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.EXDEV}
				}
				return r.Rename(from, to)
			}
			d.rename = copying
			d.crash = func(point string) bool { return point == tc.point }
			if _, err := d.poll(f.ctx); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Millisecond)
			if _, err := d.poll(f.ctx); !errors.Is(err, errCrashed) {
				t.Fatalf("poll: %v, want the crash", err)
			}

			after := f.again(d)
			after.rename = copying
			rep, err := after.poll(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if created := tc.point == "claimed"; (rep.taken == 1) != created {
				t.Errorf("taken %d after a crash at %s", rep.taken, tc.point)
			}
			if ms := f.messages(t, "drop"); len(ms) != 1 || f.payload(t, ms[0]) != "1;2;3" {
				t.Fatalf("%d messages", len(ms))
			}
			if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"order.csv"}) {
				t.Errorf("done holds %v", got)
			}
			if got := files(t, processing(d)); len(got) != 0 {
				t.Errorf("processing holds %v", got)
			}
		})
	}
}

// TestDirectoryCutBeforeCommit: the database goes away while a claimed
// file's message is being stored; nothing is stored, the file waits in
// the processing folder, and the poll after the database is back makes
// one message of it.
func TestDirectoryCutBeforeCommit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	proxy := dbtest.NewProxy(t, f.db)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms", "after": "delete"})
	d.w = f.writer(t, proxy.Pool(t))
	write(t, d.cfg.Dir, "x", "payload")
	d.crash = func(point string) bool {
		if point == "claimed" {
			proxy.Cut()
		}
		return false
	}
	if _, err := d.poll(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Millisecond)
	if _, err := d.poll(f.ctx); err == nil || errors.Is(err, errCrashed) {
		t.Fatalf("poll with the database away: %v", err)
	}
	if got := files(t, processing(d)); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("processing holds %v", got)
	}
	if ms := f.messages(t, "drop"); len(ms) != 0 {
		t.Fatalf("%d messages", len(ms))
	}
	proxy.Restore()
	d.crash = nil
	if rep, err := d.poll(f.ctx); err != nil || rep.taken != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	if ms := f.messages(t, "drop"); len(ms) != 1 {
		t.Fatalf("%d messages", len(ms))
	}
	if got := append(files(t, processing(d)), files(t, d.cfg.Dir)...); !slices.Equal(got, []string{sources.ProcessingFolder}) {
		t.Errorf("left %v", got)
	}
}

// TestDirectoryFileThatCannotBeTaken goes to the error folder with its
// reason beside it, and is counted; the others are taken.
func TestDirectoryFileThatCannotBeTaken(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms"})
	d.maxPayload = 8
	write(t, d.cfg.Dir, "big", "more than eight bytes")
	write(t, d.cfg.Dir, "small", "ok")
	_, _ = d.poll(f.ctx)
	f.clock.Advance(time.Millisecond)
	rep, err := d.poll(f.ctx)
	if err != nil || rep.taken != 1 || rep.failed != 1 || !strings.Contains(rep.problem, "big") {
		t.Fatalf("%+v %v", rep, err)
	}
	errDir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	if got := files(t, errDir); !slices.Equal(got, []string{"big", "big.reason"}) {
		t.Fatalf("error folder holds %v", got)
	}
	reason, _ := os.ReadFile(filepath.Join(errDir, "big.reason"))
	if !strings.Contains(string(reason), "over the limit of 8") {
		t.Errorf("reason %q", reason)
	}
}

// TestDirectoryKeepsEveryDoneFile: a file of a name the done folder holds
// already, with other content, is kept beside it under its message's id;
// and the same file dropped again is found stored by its identity.
func TestDirectoryKeepsEveryDoneFile(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms"})
	take := func(content string, mtime time.Time) int {
		t.Helper()
		write(t, d.cfg.Dir, "daily.csv", content)
		if err := os.Chtimes(filepath.Join(d.cfg.Dir, "daily.csv"), mtime, mtime); err != nil {
			t.Fatal(err)
		}
		_, _ = d.poll(f.ctx)
		f.clock.Advance(time.Millisecond)
		rep, err := d.poll(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep.taken
	}
	monday := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	if take("monday", monday) != 1 || take("tuesday", monday.Add(24*time.Hour)) != 1 {
		t.Fatal("a new file was not taken")
	}
	ms := f.messages(t, "drop")
	if got := files(t, d.cfg.DoneDir); len(ms) != 2 || !slices.Equal(got, []string{"daily.csv", "daily.csv." + ms[1].ID.String()}) {
		t.Fatalf("done holds %v", got)
	}
	// Monday's file again, as it was: the same message, and no new file.
	if n := take("monday", monday); n != 0 {
		t.Errorf("the same file taken again made %d messages", n)
	}
	if got := files(t, d.cfg.DoneDir); len(got) != 2 {
		t.Errorf("done holds %v", got)
	}
}

func TestFileKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	k := FileKey("a", 1, at, []byte("x"))
	for _, other := range []string{FileKey("b", 1, at, []byte("x")), FileKey("a", 2, at, []byte("x")),
		FileKey("a", 1, at.Add(1), []byte("x")), FileKey("a", 1, at, []byte("y"))} {
		if other == k {
			t.Error("two identities share a key")
		}
	}
	if k != FileKey("a", 1, at, []byte("x")) || len(k) > 255 {
		t.Errorf("key %q", k)
	}
	var _ = commands.NewMessage{IdempotencyKey: k}
}

// TestDirectoryFileWhoseKeyIsHeld: a file whose key a message with other
// content holds goes to the error folder with the conflict as its reason,
// and the source goes on with the next.
func TestDirectoryFileWhoseKeyIsHeld(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms"})
	write(t, d.cfg.Dir, "taken", "order 1")
	write(t, d.cfg.Dir, "next", "order 2")
	info, err := os.Stat(filepath.Join(d.cfg.Dir, "taken"))
	if err != nil {
		t.Fatal(err)
	}
	key := FileKey("taken", info.Size(), info.ModTime(), []byte("order 1"))
	if _, _, err := f.w.Ingest(f.ctx, commands.NewMessage{Source: "drop", From: "acme", To: "globex", Payload: []byte("forged"),
		IdempotencyKey: key}); err != nil {
		t.Fatal(err)
	}
	_, _ = d.poll(f.ctx)
	f.clock.Advance(time.Millisecond)
	rep, err := d.poll(f.ctx)
	if err != nil || rep.taken != 1 || rep.failed != 1 || !strings.Contains(rep.problem, "taken") {
		t.Fatalf("%+v %v", rep, err)
	}
	errDir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	if got := files(t, errDir); !slices.Equal(got, []string{"taken", "taken.reason"}) {
		t.Fatalf("error folder holds %v", got)
	}
	if reason, _ := os.ReadFile(filepath.Join(errDir, "taken.reason")); !strings.Contains(string(reason), "idempotency key") ||
		!strings.Contains(string(reason), "another payload") {
		t.Errorf("reason %q", reason)
	}
	if got := f.bodies(t, "drop"); got != "forged,order 2" {
		t.Errorf("messages %s", got)
	}
}

// TestDirectoryWritesForOwnerAndGroupOnly: the folders a directory source
// makes, the copy it writes to a done folder on another file system and
// the reason beside a file it could not take are for the owner and the
// group only.
func TestDirectoryWritesForOwnerAndGroupOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms"})
	d.maxPayload = 8
	d.rename = func(r *os.Root, from, to string) error {
		if strings.HasPrefix(to, "done") {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.EXDEV}
		}
		return r.Rename(from, to)
	}
	write(t, d.cfg.Dir, "big", "more than eight bytes")
	write(t, d.cfg.Dir, "small", "ok")
	_, _ = d.poll(f.ctx)
	f.clock.Advance(time.Millisecond)
	if rep, err := d.poll(f.ctx); err != nil || rep.taken != 1 || rep.failed != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	errDir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	for path, want := range map[string]os.FileMode{processing(d): 0o750, d.cfg.DoneDir: 0o750, errDir: 0o750,
		filepath.Join(d.cfg.DoneDir, "small"): 0o640, filepath.Join(errDir, "big.reason"): 0o640} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// The umask may take more away, never add.
		if got := info.Mode().Perm(); got&^want != 0 {
			t.Errorf("%s has mode %v, want at most %v", path, got, want)
		}
	}
}

// processing is the path of a directory source's processing folder.
func processing(d *directory) string { return filepath.Join(d.cfg.Dir, sources.ProcessingFolder) }

// settle polls a directory source twice, a settle apart, and returns the
// second poll's report.
func settle(t *testing.T, f *fixture, d *directory) (report, error) {
	t.Helper()
	_, _ = d.poll(f.ctx)
	f.clock.Advance(d.cfg.Settle.D())
	return d.poll(f.ctx)
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func isSymlink(t *testing.T, path string) bool {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode()&os.ModeSymlink != 0
}

// TestDirectoryRefusesAProcessingSymlink: a .processing that a sender made
// a symlink, to a folder outside the directory or to one inside it, is
// refused: nothing there is read or moved, the poll says why and counts
// the file waiting; once the symlink is gone the file is taken.
func TestDirectoryRefusesAProcessingSymlink(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"outside", "inside"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			d := f.dirSource(t, "drop", map[string]any{"settle": "1ms", "pattern": "*.csv"})
			kept := t.TempDir()
			target := kept
			if where == "inside" {
				kept, target = filepath.Join(d.cfg.Dir, "kept"), "kept"
				if err := os.Mkdir(kept, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write(t, kept, "secret.csv", "s3cret")
			if err := os.Symlink(target, processing(d)); err != nil {
				t.Fatal(err)
			}
			write(t, d.cfg.Dir, "order.csv", "1;2;3")
			rep, err := settle(t, f, d)
			if err == nil || !strings.Contains(err.Error(), ".processing is a symlink") || rep.taken != 0 || rep.backlog != 1 {
				t.Fatalf("%+v %v", rep, err)
			}
			if ms := f.messages(t, "drop"); len(ms) != 0 {
				t.Fatalf("%d messages", len(ms))
			}
			if got := files(t, kept); !slices.Equal(got, []string{"secret.csv"}) || read(t, filepath.Join(kept, "secret.csv")) != "s3cret" {
				t.Fatalf("the symlink's target holds %v", got)
			}
			if got := files(t, d.cfg.DoneDir); len(got) != 0 {
				t.Fatalf("done holds %v", got)
			}

			if err := os.Remove(processing(d)); err != nil {
				t.Fatal(err)
			}
			if rep, err := d.poll(f.ctx); err != nil || rep.taken != 1 {
				t.Fatalf("after the symlink is gone: %+v %v", rep, err)
			}
			if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"order.csv"}) {
				t.Errorf("done holds %v", got)
			}
		})
	}
}

// TestDirectoryRefusesADoneSymlink: a done folder in the directory that a
// sender made a symlink, to a folder outside the directory or to one
// inside it, is refused: nothing is written there, the message is stored
// and the file waits in .processing, the poll saying why, and the other
// files are taken all the same; once the symlink is gone the files are
// moved to done, with no other message.
func TestDirectoryRefusesADoneSymlink(t *testing.T) {
	t.Parallel()
	for _, where := range []string{"outside", "inside"} {
		t.Run(where, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			d := f.dirSource(t, "drop", map[string]any{"settle": "1ms"})
			elsewhere := t.TempDir()
			target := elsewhere
			if where == "inside" {
				elsewhere, target = filepath.Join(d.cfg.Dir, "elsewhere"), "elsewhere"
				if err := os.Mkdir(elsewhere, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, d.cfg.DoneDir); err != nil {
				t.Fatal(err)
			}
			write(t, d.cfg.Dir, "a", "order 1")
			write(t, d.cfg.Dir, "b", "order 2")
			rep, err := settle(t, f, d)
			if err != nil || rep.taken != 2 || rep.failed != 2 || !strings.Contains(rep.problem, "done is a symlink") {
				t.Fatalf("%+v %v", rep, err)
			}
			if got := files(t, elsewhere); len(got) != 0 {
				t.Fatalf("the symlink's target holds %v", got)
			}
			if got := files(t, processing(d)); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("processing holds %v", got)
			}

			if err := os.Remove(d.cfg.DoneDir); err != nil {
				t.Fatal(err)
			}
			if rep, err := d.poll(f.ctx); err != nil || rep.taken != 0 || rep.failed != 0 {
				t.Fatalf("after the symlink is gone: %+v %v", rep, err)
			}
			if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"a", "b"}) {
				t.Errorf("done holds %v", got)
			}
			if got := f.bodies(t, "drop"); got != "order 1,order 2" {
				t.Errorf("messages %s", got)
			}
		})
	}
}

// TestDirectoryWritesNoReasonThroughASymlink: a symlink a sender put in the
// error folder where a file's reason would go is not written through: the
// file and its reason take the next free name, and the symlink's target
// stays as it was.
func TestDirectoryWritesNoReasonThroughASymlink(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms"})
	d.maxPayload = 8
	victim := filepath.Join(t.TempDir(), "victim")
	write(t, filepath.Dir(victim), "victim", "precious")
	errDir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	if err := os.Mkdir(errDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(errDir, "big.reason")); err != nil {
		t.Fatal(err)
	}
	write(t, d.cfg.Dir, "big", "more than eight bytes")
	if rep, err := settle(t, f, d); err != nil || rep.failed != 1 || !strings.Contains(rep.problem, "over the limit") {
		t.Fatalf("%+v %v", rep, err)
	}
	if got := read(t, victim); got != "precious" {
		t.Errorf("the symlink's target holds %q", got)
	}
	if got := files(t, errDir); !slices.Equal(got, []string{"big.1", "big.1.reason", "big.reason"}) {
		t.Fatalf("error folder holds %v", got)
	}
	if reason := read(t, filepath.Join(errDir, "big.1.reason")); !strings.Contains(reason, "over the limit of 8") {
		t.Errorf("reason %q", reason)
	}
}

// TestDirectoryReadsNoClaimedSymlink: a symlink in the processing folder,
// as the claim of a name swapped for one after the listing leaves it, is
// not read, whether it leads out of the directory or to a file inside it:
// it goes to the error folder as it is, with the reason.
func TestDirectoryReadsNoClaimedSymlink(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms", "pattern": "*.csv"})
	secret := filepath.Join(t.TempDir(), "secret.key")
	write(t, filepath.Dir(secret), "secret.key", "s3cret")
	write(t, d.cfg.Dir, "notes.txt", "not to be taken")
	if err := os.Mkdir(processing(d), 0o750); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"stolen.csv": secret, "inner.csv": "../notes.txt"} {
		if err := os.Symlink(target, filepath.Join(processing(d), name)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := d.poll(f.ctx)
	if err != nil || rep.taken != 0 || rep.failed != 2 || !strings.Contains(rep.problem, "a symlink, not a regular file") {
		t.Fatalf("%+v %v", rep, err)
	}
	if ms := f.messages(t, "drop"); len(ms) != 0 {
		t.Fatalf("%d messages", len(ms))
	}
	errDir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	if got := files(t, errDir); !slices.Equal(got, []string{"inner.csv", "inner.csv.reason", "stolen.csv", "stolen.csv.reason"}) {
		t.Fatalf("error folder holds %v", got)
	}
	if !isSymlink(t, filepath.Join(errDir, "stolen.csv")) || read(t, secret) != "s3cret" ||
		read(t, filepath.Join(d.cfg.Dir, "notes.txt")) != "not to be taken" {
		t.Error("a symlink's target was moved or changed")
	}
}

// TestDirectoryDoneFolderThatIsAFile: a file named done where the done
// folder should be is reported; the messages are stored, the files wait
// in .processing, and once the file is gone they are moved to done, each
// once, with no other message.
func TestDirectoryDoneFolderThatIsAFile(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms", "pattern": "*.csv"})
	write(t, d.cfg.Dir, "done", "not a folder")
	write(t, d.cfg.Dir, "a.csv", "order 1")
	rep, err := settle(t, f, d)
	if err != nil || rep.taken != 1 || rep.failed != 1 || !strings.Contains(rep.problem, "done is a file; it must be a folder") {
		t.Fatalf("%+v %v", rep, err)
	}
	// The next file is taken too, the first waiting.
	write(t, d.cfg.Dir, "b.csv", "order 2")
	if rep, err := settle(t, f, d); err != nil || rep.taken != 1 || rep.backlog != 0 {
		t.Fatalf("the next file: %+v %v", rep, err)
	}
	if got := files(t, processing(d)); !slices.Equal(got, []string{"a.csv", "b.csv"}) {
		t.Fatalf("processing holds %v", got)
	}

	if err := os.Remove(d.cfg.DoneDir); err != nil {
		t.Fatal(err)
	}
	if rep, err := d.poll(f.ctx); err != nil || rep.taken != 0 || rep.failed != 0 {
		t.Fatalf("after the file is gone: %+v %v", rep, err)
	}
	if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"a.csv", "b.csv"}) {
		t.Errorf("done holds %v", got)
	}
	if got := f.bodies(t, "drop"); got != "order 1,order 2" {
		t.Errorf("messages %s", got)
	}
}

// TestDirectoryErrorFolderThatIsAFile: a file named error where the error
// folder should be is reported when a file is to go there; that file
// waits in .processing, the other files are taken, and once the file
// named error is gone the refused file goes to the error folder.
func TestDirectoryErrorFolderThatIsAFile(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms", "pattern": "*.csv"})
	d.maxPayload = 8
	errDir := filepath.Join(d.cfg.Dir, sources.ErrorFolder)
	write(t, d.cfg.Dir, sources.ErrorFolder, "not a folder")
	write(t, d.cfg.Dir, "big.csv", "more than eight bytes")
	write(t, d.cfg.Dir, "a.csv", "order 1")
	rep, err := settle(t, f, d)
	if err != nil || rep.taken != 1 || rep.failed != 1 || !strings.Contains(rep.problem, "over the limit") ||
		!strings.Contains(rep.problem, "error is a file; it must be a folder") {
		t.Fatalf("%+v %v", rep, err)
	}
	write(t, d.cfg.Dir, "b.csv", "order 2")
	if rep, err := settle(t, f, d); err != nil || rep.taken != 1 || rep.failed != 1 {
		t.Fatalf("the next file: %+v %v", rep, err)
	}
	if got := files(t, processing(d)); !slices.Equal(got, []string{"big.csv"}) {
		t.Fatalf("processing holds %v", got)
	}

	if err := os.Remove(errDir); err != nil {
		t.Fatal(err)
	}
	if rep, err := d.poll(f.ctx); err != nil || rep.failed != 1 || strings.Contains(rep.problem, "left in") {
		t.Fatalf("after the file is gone: %+v %v", rep, err)
	}
	if got := files(t, errDir); !slices.Equal(got, []string{"big.csv", "big.csv.reason"}) {
		t.Errorf("error folder holds %v", got)
	}
	if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"a.csv", "b.csv"}) {
		t.Errorf("done holds %v", got)
	}
	if got := f.bodies(t, "drop"); got != "order 1,order 2" {
		t.Errorf("messages %s", got)
	}
}

// TestDirectoryCopiesToADoneFolderOutside: a done folder outside the
// directory gets a copy of the file, with its modification time, for the
// owner and the group only; the claimed file is then removed.
func TestDirectoryCopiesToADoneFolderOutside(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.dirSource(t, "drop", map[string]any{"settle": "1ms", "done_dir": filepath.Join(t.TempDir(), "done")})
	write(t, d.cfg.Dir, "order.csv", "1;2;3")
	mtime := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(d.cfg.Dir, "order.csv"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if rep, err := settle(t, f, d); err != nil || rep.taken != 1 {
		t.Fatalf("%+v %v", rep, err)
	}
	if got := files(t, d.cfg.DoneDir); !slices.Equal(got, []string{"order.csv"}) {
		t.Fatalf("done holds %v", got)
	}
	info, err := os.Lstat(filepath.Join(d.cfg.DoneDir, "order.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&^0o640 != 0 || !info.ModTime().Equal(mtime) ||
		read(t, filepath.Join(d.cfg.DoneDir, "order.csv")) != "1;2;3" {
		t.Errorf("done file %v %v", info.Mode(), info.ModTime())
	}
	if got := files(t, processing(d)); len(got) != 0 {
		t.Errorf("processing holds %v", got)
	}
}
