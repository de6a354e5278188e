package retention

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
)

// Manifest describes one archive file; it is written beside it as
// batch-NNNNNNNN.manifest.json and its SHA-256 is journaled with the
// file's.
type Manifest struct {
	Archive uuid.UUID `json:"archive"`
	Batch   int64     `json:"batch"`
	// File is the name of the archive file, SHA256 and Bytes its digest
	// and size.
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	// Messages and Events count what the file holds, Records the events
	// of the retention stream among them; Positions lists the events'
	// positions as runs [first, last], in order.
	Messages  int        `json:"messages"`
	Events    int        `json:"events"`
	Records   int        `json:"records"`
	Positions [][2]int64 `json:"positions"`
	// Settled messages left by settled_after, Faulted ones by failed_after.
	Settled int `json:"settled"`
	Faulted int `json:"faulted"`
	// CreatedAt is when the file was written, by the clock of the process.
	CreatedAt time.Time `json:"created_at"`
}

// The names of a batch's files, and of the files they are written as
// until the batch commits.
func dataName(batch int64) string     { return fmt.Sprintf("batch-%08d.jsonl.gz", batch) }
func manifestName(batch int64) string { return fmt.Sprintf("batch-%08d.manifest.json", batch) }

// batchesPerDir is how many batches share a directory of the archive, so
// that no directory holds more than a few thousand files.
const batchesPerDir = 1000

// shard is the directory, in the archive's, of a batch's files.
func shard(batch int64) string { return fmt.Sprintf("%06d", (batch-1)/batchesPerDir) }

// pendingDir is the directory, in the archive's, of the files of a batch
// that has not committed yet: a pass lists it, not the whole archive.
const pendingDir = "pending"

const pendingSuffix = ".pending"

// pendingName is final with a random token, so two writers of one batch
// number never write the same file.
func pendingName(final, token string) string {
	batch, rest, _ := strings.Cut(final, ".")
	return batch + "." + token + "." + rest + pendingSuffix
}

// finalName is the name a pending file takes once its batch committed.
func finalName(pending string) (string, bool) {
	name, ok := strings.CutSuffix(pending, pendingSuffix)
	if !ok {
		return "", false
	}
	parts := strings.SplitN(name, ".", 3)
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "batch-") {
		return "", false
	}
	return parts[0] + "." + parts[2], true
}

// archive is this database's archive directory, as a pass found it.
type archive struct {
	id uuid.UUID
	// root is the archive_dir in force, and dir the archive's directory
	// in it, where new batches go.
	root, dir string
	// last is the last batch the journal records, nil before the first,
	// and lastVersion its version in the retention stream.
	last        *journal.RetentionArchived
	lastVersion int
}

// archiveIDSQL draws the archive's id once and reads it.
const archiveIDSQL = `WITH drawn AS (
		INSERT INTO retention_archive (id) VALUES (gen_random_uuid()) ON CONFLICT (singleton) DO NOTHING RETURNING id)
	SELECT id FROM drawn UNION ALL SELECT id FROM retention_archive LIMIT 1`

// lastArchived returns the last retention.archived event and its version,
// nil when there is none.
func lastArchived(ctx context.Context, q journal.Querier) (*journal.RetentionArchived, int, error) {
	events, err := journal.Latest(ctx, q, journal.RetentionStream, journal.KindRetentionArchived, 1)
	if err != nil || len(events) == 0 {
		return nil, 0, err
	}
	return events[0].Payload.(*journal.RetentionArchived), events[0].Version, nil
}

// batchPath is where a final file of a batch lies in dir, an archive's
// directory.
func batchPath(dir string, batch int64, name string) string {
	return filepath.Join(dir, shard(batch), name)
}

// recordedDir is the archive's directory under the archive_dir the record
// of a batch names, or under root for a record that names none.
func recordedDir(rec *journal.RetentionArchived, root string) string {
	if rec.ArchiveDir != "" {
		root = rec.ArchiveDir
	}
	return filepath.Join(root, rec.Archive.String())
}

// openArchive finds the archive's directory under root, creating it, and
// settles what an interrupted pass left under pending names: in the
// directory the last batch's record names, which is another when
// archive_dir changed since, and then in this one (see settle).
func openArchive(ctx context.Context, q interface {
	journal.Querier
	QueryRow(context.Context, string, ...any) pgx.Row
}, root string) (*archive, error) {
	a := &archive{root: root}
	if err := q.QueryRow(ctx, archiveIDSQL).Scan(&a.id); err != nil {
		return nil, fmt.Errorf("read the archive id: %w", err)
	}
	a.dir = filepath.Join(root, a.id.String())
	if err := os.MkdirAll(filepath.Join(a.dir, pendingDir), 0o750); err != nil {
		return nil, fmt.Errorf("archive directory: %w", err)
	}
	var err error
	if a.last, a.lastVersion, err = lastArchived(ctx, q); err != nil {
		return nil, fmt.Errorf("read the last archived batch: %w", err)
	}
	if a.last != nil {
		if dir := recordedDir(a.last, root); dir != a.dir {
			if err := a.settle(dir); err != nil {
				return nil, err
			}
		}
	}
	if err := a.settle(a.dir); err != nil {
		return nil, err
	}
	return a, nil
}

// settle settles the pending files in dir, an archive's directory: those
// of the last batch the journal records, with the journaled digests, take
// their final names where its record says when those are missing (the pass
// stopped between its commit and its rename); every other pending file is
// of a batch that never committed, or a copy of one that has its final
// files, and goes. A directory without a pending directory has nothing to
// settle.
func (a *archive) settle(dir string) error {
	pending := filepath.Join(dir, pendingDir)
	entries, err := os.ReadDir(pending)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive directory: %w", err)
	}
	want, home := map[string]string{}, ""
	if a.last != nil {
		want[a.last.File], want[a.last.Manifest] = a.last.SHA256, a.last.ManifestSHA256
		home = recordedDir(a.last, a.root)
	}
	changed := false
	for _, e := range entries {
		path := filepath.Join(pending, e.Name())
		final, ok := finalName(e.Name())
		if !ok {
			continue
		}
		if sum, ok := want[final]; ok && !exists(batchPath(home, a.last.Batch, final)) && fileSHA256(path) == sum {
			err = rename(path, batchPath(home, a.last.Batch, final))
		} else {
			err = os.Remove(path)
		}
		if err != nil {
			return fmt.Errorf("settle %s: %w", path, err)
		}
		changed = true
	}
	if changed {
		return errors.Join(syncDir(pending), syncDir(dir))
	}
	return nil
}

// rename gives a pending file its final path, and makes that durable.
func rename(pending, final string) error {
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := os.Rename(pending, final); err != nil {
		return err
	}
	return syncDir(dir)
}

// written is a batch's files under their pending names.
type written struct {
	batch              int64
	manifest           Manifest
	data, meta         string // the pending paths
	manifestSHA256     string
	manifestName, file string
}

// write writes the events, one line each in position order, gzipped, and
// their manifest, under pending names, and syncs both.
func (a *archive) write(batch int64, events []journal.Event, settled, faulted, messages, records int, at time.Time) (*written, error) {
	token := randomToken()
	w := &written{batch: batch, file: dataName(batch), manifestName: manifestName(batch)}
	w.data = filepath.Join(a.dir, pendingDir, pendingName(w.file, token))
	w.meta = filepath.Join(a.dir, pendingDir, pendingName(w.manifestName, token))
	m := Manifest{Archive: a.id, Batch: batch, File: w.file, Messages: messages, Events: len(events), Records: records,
		Settled: settled, Faulted: faulted, CreatedAt: at.UTC()}
	sum, size, err := writeSynced(w.data, func(out io.Writer) error {
		z, err := gzip.NewWriterLevel(out, gzip.BestSpeed)
		if err != nil {
			return err
		}
		buf := bufio.NewWriterSize(z, 64<<10)
		for _, e := range events {
			payload, err := json.Marshal(e.Payload)
			if err != nil {
				return fmt.Errorf("encode event %d: %w", e.Position, err)
			}
			line, err := json.Marshal(journal.LineOf(e, payload))
			if err != nil {
				return fmt.Errorf("encode event %d: %w", e.Position, err)
			}
			buf.Write(append(line, '\n'))
			m.Positions = addPosition(m.Positions, e.Position)
		}
		if err := buf.Flush(); err != nil {
			return err
		}
		return z.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", w.file, err)
	}
	m.SHA256, m.Bytes = sum, size
	w.manifest = m
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if w.manifestSHA256, _, err = writeSynced(w.meta, func(out io.Writer) error {
		_, err := out.Write(append(data, '\n'))
		return err
	}); err != nil {
		return nil, fmt.Errorf("write %s: %w", w.manifestName, err)
	}
	return w, nil
}

// finish gives the files of a committed batch their final names.
func (a *archive) finish(w *written) error {
	return errors.Join(rename(w.data, batchPath(a.dir, w.batch, w.file)), rename(w.meta, batchPath(a.dir, w.batch, w.manifestName)),
		syncDir(filepath.Join(a.dir, pendingDir)))
}

// discard removes the files of a batch that did not commit.
func (w *written) discard() error {
	return errors.Join(os.Remove(w.data), os.Remove(w.meta))
}

// addPosition appends p to runs, extending the last run when p follows it.
func addPosition(runs [][2]int64, p int64) [][2]int64 {
	if n := len(runs); n > 0 && runs[n-1][1]+1 == p {
		runs[n-1][1] = p
		return runs
	}
	return append(runs, [2]int64{p, p})
}

// writeSynced creates path, fills it with fill, syncs and closes it, and
// returns the SHA-256 and size of what was written.
func writeSynced(path string, fill func(io.Writer) error) (string, int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	c := &countingWriter{w: io.MultiWriter(f, h)}
	err = fill(c)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), c.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// syncDir makes the renames and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// fileSHA256 is the hex SHA-256 of a file, "" when it cannot be read.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func randomToken() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
