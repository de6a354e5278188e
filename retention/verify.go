package retention

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
)

// ArchiveReport is what VerifyArchive checked and found.
type ArchiveReport struct {
	// Dirs are the directories the files were read from: that of the
	// directory given, then those the batches' records name.
	Dirs []string
	// Files, Messages and Events count the batches checked and what they
	// hold.
	Files, Messages, Events int
	Violations              []projection.Violation
}

// VerifyArchive checks the archive against the journal. The records of the
// batches are the journal's retention.archived events and, for the batches
// whose records left in turn, the same events found in later files: every
// batch from the first to the last must have one. Each batch's files are
// read in the archive's directory under the archive_dir its record names;
// those of a batch whose record names none, written before records named
// it, in dir (the archive_dir, or the archive's own directory in it). Each
// batch has its file and manifest with the recorded SHA-256; the manifest
// agrees with the record; each line of the file is an event that decodes
// and passes the envelope check, at the positions the manifest lists; each
// message's stream folds with every event legal from its first to a
// settled end; no position is in two files; and nothing archived is live,
// in the journal or the tables. A file of our naming, in a directory read,
// that no batch records there is a violation too. Each violation names the
// file.
func VerifyArchive(ctx context.Context, db *pgxpool.Pool, dir string) (*ArchiveReport, error) {
	r := &ArchiveReport{Dirs: []string{filepath.Clean(dir)}}
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		live, err := archivedBatches(ctx, tx)
		if err != nil || len(live) == 0 {
			return err
		}
		newest := live[len(live)-1]
		if d := filepath.Join(dir, newest.Archive.String()); exists(d) {
			r.Dirs[0] = d
		}
		last, err := journal.LastPosition(ctx, tx)
		if err != nil {
			return err
		}
		v := &verifier{r: r, tx: tx, seen: make([]uint64, last/64+1), records: map[int64]*journal.RetentionArchived{}}
		for _, rec := range live {
			v.record(rec, "the journal")
		}
		// A batch's record is live or in a later batch's file: from the
		// last batch down, each is known before its turn.
		for batch := newest.Batch; batch >= 1; batch-- {
			rec := v.records[batch]
			if rec == nil {
				v.fail(dataName(batch), "no record of this batch is in the journal or in a later file")
				continue
			}
			if rec.Archive != newest.Archive {
				v.fail(rec.File, fmt.Sprintf("belongs to archive %s, the last batch to %s", rec.Archive, newest.Archive))
			}
			if err := v.batch(ctx, rec); err != nil {
				return err
			}
		}
		v.extraFiles()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify the archive: %w", err)
	}
	return r, nil
}

// archivedBatches reads the retention.archived events, in order.
func archivedBatches(ctx context.Context, q journal.Querier) ([]*journal.RetentionArchived, error) {
	events, err := journal.Stream(ctx, q, journal.RetentionStream)
	if err != nil {
		return nil, err
	}
	var out []*journal.RetentionArchived
	for _, e := range events {
		if p, ok := e.Payload.(*journal.RetentionArchived); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

type verifier struct {
	// r.Dirs[0] is where the batches whose records name no directory lie.
	r  *ArchiveReport
	tx pgx.Tx
	// seen has a bit per position found in a file so far.
	seen []uint64
	// records are the batches' records found so far, by batch.
	records map[int64]*journal.RetentionArchived
}

// record keeps the record of a batch, found in where.
func (v *verifier) record(rec *journal.RetentionArchived, where string) {
	if v.records[rec.Batch] != nil {
		v.fail(rec.File, "its batch is recorded twice, the second time in "+where)
		return
	}
	v.records[rec.Batch] = rec
}

func (v *verifier) fail(file, problem string) {
	v.r.Violations = append(v.r.Violations, projection.Violation{Problem: "archive file " + file + ": " + problem})
}

// dir is the archive's directory a batch's files lie in, as its record
// says, which it adds to the report's directories.
func (v *verifier) dir(rec *journal.RetentionArchived) string {
	if rec.ArchiveDir == "" {
		return v.r.Dirs[0]
	}
	dir := recordedDir(rec, "")
	if !slices.Contains(v.r.Dirs, dir) {
		v.r.Dirs = append(v.r.Dirs, dir)
	}
	return dir
}

// open opens a batch's file: the final one, or, in the moment between a
// batch's commit and its rename, the pending one with the recorded digest.
func (v *verifier) open(rec *journal.RetentionArchived, name, sum string) (*os.File, error) {
	dir := v.dir(rec)
	path := batchPath(dir, rec.Batch, name)
	if !exists(path) {
		matches, _ := filepath.Glob(filepath.Join(dir, pendingDir, pendingName(name, "*")))
		for _, m := range matches {
			if fileSHA256(m) == sum {
				path = m
				break
			}
		}
	}
	return os.Open(path)
}

// batch checks one recorded batch against its files and the journal.
func (v *verifier) batch(ctx context.Context, rec *journal.RetentionArchived) error {
	v.r.Files++
	if !v.digest(rec, rec.Manifest, rec.ManifestSHA256) || !v.digest(rec, rec.File, rec.SHA256) {
		return nil
	}
	m, ok := v.manifest(rec)
	if !ok {
		return nil
	}
	f, err := v.open(rec, rec.File, rec.SHA256)
	if err != nil {
		v.fail(rec.File, err.Error())
		return nil
	}
	defer f.Close()
	streams, records, positions, ok := v.lines(rec.File, f, m)
	if !ok {
		return nil
	}
	if len(records) != rec.Records {
		v.fail(rec.File, fmt.Sprintf("holds %d records of the retention stream; the journal recorded %d", len(records), rec.Records))
	}
	for _, e := range records {
		if p, ok := e.Payload.(*journal.RetentionArchived); ok {
			v.record(p, rec.File)
		}
	}
	v.r.Events += len(positions)
	settled, faulted := 0, 0
	ids := slices.SortedFunc(maps.Keys(streams), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		folded := &projection.Message{}
		for _, e := range streams[id] {
			if err := projection.Apply(folded, e); err != nil {
				v.r.Violations = append(v.r.Violations, projection.Violation{Position: e.Position, MessageID: id,
					Problem: "archive file " + rec.File + ": " + err.Error()})
			}
		}
		switch {
		case !folded.Status.Settled():
			v.fail(rec.File, fmt.Sprintf("message %s folds to %s, which is not settled", id, folded.Status))
		case folded.Status.Faulted():
			faulted++
		default:
			settled++
		}
	}
	v.r.Messages += len(streams)
	if len(streams) != rec.Messages || settled != rec.Settled || faulted != rec.Faulted {
		v.fail(rec.File, fmt.Sprintf("holds %d messages (%d settled, %d faulted); the journal recorded %d (%d, %d)",
			len(streams), settled, faulted, rec.Messages, rec.Settled, rec.Faulted))
	}
	return v.notLive(ctx, rec.File, ids, positions)
}

// digest checks that a file of a batch has the recorded SHA-256.
func (v *verifier) digest(rec *journal.RetentionArchived, name, sum string) bool {
	f, err := v.open(rec, name, sum)
	if err != nil {
		v.fail(name, "missing: "+err.Error())
		return false
	}
	f.Close()
	if got := fileSHA256(f.Name()); got != sum {
		v.fail(name, fmt.Sprintf("its SHA-256 is %s, the journal recorded %s: the file was changed", got, sum))
		return false
	}
	return true
}

// manifest reads a batch's manifest and checks it against the record.
func (v *verifier) manifest(rec *journal.RetentionArchived) (*Manifest, bool) {
	f, err := v.open(rec, rec.Manifest, rec.ManifestSHA256)
	if err != nil {
		v.fail(rec.Manifest, err.Error())
		return nil, false
	}
	defer f.Close()
	var m Manifest
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		v.fail(rec.Manifest, "does not read: "+err.Error())
		return nil, false
	}
	var first, last int64
	if len(m.Positions) > 0 {
		first, last = m.Positions[0][0], m.Positions[len(m.Positions)-1][1]
	}
	if m.Archive != rec.Archive || m.Batch != rec.Batch || m.File != rec.File || m.SHA256 != rec.SHA256 ||
		m.Bytes != rec.Bytes || m.Messages != rec.Messages || m.Events != rec.Events || m.Records != rec.Records || m.Settled != rec.Settled ||
		m.Faulted != rec.Faulted || first != rec.FirstPosition || last != rec.LastPosition {
		v.fail(rec.Manifest, "does not agree with the journal's record of the batch")
		return nil, false
	}
	return &m, true
}

// lines reads the events of a file, checking each and its position against
// the manifest and every file read before, and returns the messages'
// events by stream, the retention stream's records, and all the positions.
func (v *verifier) lines(name string, f io.Reader, m *Manifest) (map[uuid.UUID][]journal.Event, []journal.Event, []int64, bool) {
	fail := func(problem string) (map[uuid.UUID][]journal.Event, []journal.Event, []int64, bool) {
		v.fail(name, problem)
		return nil, nil, nil, false
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		return fail("is not gzip: " + err.Error())
	}
	var want []int64
	for _, run := range m.Positions {
		for p := run[0]; p <= run[1] && len(want) <= m.Events; p++ {
			want = append(want, p)
		}
	}
	streams := map[uuid.UUID][]journal.Event{}
	var (
		records   []journal.Event
		positions []int64
	)
	sc := bufio.NewScanner(z)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var l journal.Line
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return fail(fmt.Sprintf("line %d does not read: %v", len(positions)+1, err))
		}
		e, err := l.Event()
		if err != nil {
			return fail(fmt.Sprintf("line %d: %v", len(positions)+1, err))
		}
		i := len(positions)
		switch {
		case i >= len(want) || want[i] != e.Position:
			return fail(fmt.Sprintf("line %d is position %d, which the manifest does not list there", i+1, e.Position))
		case e.Position < 1 || int(e.Position/64) >= len(v.seen):
			return fail(fmt.Sprintf("position %d is beyond the journal's", e.Position))
		case v.seen[e.Position/64]&(1<<(e.Position%64)) != 0:
			v.fail(name, fmt.Sprintf("position %d is in another file too", e.Position))
		}
		v.seen[e.Position/64] |= 1 << (e.Position % 64)
		positions = append(positions, e.Position)
		if e.Stream == journal.RetentionStream {
			records = append(records, e)
			continue
		}
		id, err := uuid.Parse(e.Stream)
		if err != nil {
			return fail(fmt.Sprintf("position %d is of stream %q, neither a message's nor retention's", e.Position, e.Stream))
		}
		streams[id] = append(streams[id], e)
	}
	if err := sc.Err(); err != nil {
		return fail("does not read: " + err.Error())
	}
	if len(positions) != len(want) || len(positions) != m.Events {
		return fail(fmt.Sprintf("holds %d events, the manifest lists %d positions and counts %d", len(positions), len(want), m.Events))
	}
	return streams, records, positions, true
}

// notLive checks that no archived message or position is in the journal
// or the tables any more.
func (v *verifier) notLive(ctx context.Context, name string, ids []uuid.UUID, positions []int64) error {
	var events, messages int
	b := &pgx.Batch{}
	journal.QueueCountLive(b, positions, streamsOf(ids), &events)
	projection.QueueCountMessages(b, ids, &messages)
	if err := v.tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if live := events + messages; live > 0 {
		v.fail(name, fmt.Sprintf("%d of its events or messages are live still", live))
	}
	return nil
}

// extraFiles reports the files of our naming, in the directories read and
// outside their pending directories, that no batch records where they
// lie.
func (v *verifier) extraFiles() {
	named := map[string]bool{}
	for _, rec := range v.records {
		for _, name := range []string{rec.File, rec.Manifest} {
			named[batchPath(v.dir(rec), rec.Batch, name)] = true
		}
	}
	for _, dir := range v.r.Dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.IsDir() && path == filepath.Join(dir, pendingDir):
				return filepath.SkipDir
			case !d.IsDir() && strings.HasPrefix(d.Name(), "batch-") && !named[path]:
				v.fail(path, "is in no batch the journal records")
			}
			return nil
		})
		if err != nil {
			v.fail(dir, err.Error())
		}
	}
}
