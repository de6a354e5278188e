package journal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// RetentionStream is the stream of retention's own record: what left the
// journal, in which archive file, and each pass's counts. Its events leave
// too, archived with a later batch, all but the last batch's record, which
// carries the totals of every batch before it.
const RetentionStream = "retention"

// namedStream reports whether stream is one of the streams that are not a
// message's.
func namedStream(stream string) bool { return stream == ConfigStream || stream == RetentionStream }

// MessagePayloadExpunged: retention dropped the payload bytes of a settled
// message. The size and SHA-256 it was accepted with stay on the message.
type MessagePayloadExpunged struct {
	PayloadSize   int64  `json:"payload_size"`
	PayloadSHA256 string `json:"payload_sha256"`
	// After is the payload_after period that applied.
	After lifecycle.Duration `json:"after"`
}

func (*MessagePayloadExpunged) Kind() Kind { return KindMessagePayloadExpunged }
func (p *MessagePayloadExpunged) Text() string {
	return fmt.Sprintf("payload expunged %s after the message settled: %s, sha256 %s", p.After, lifecycle.Count(p.PayloadSize, "byte", "bytes"), p.PayloadSHA256)
}
func (p *MessagePayloadExpunged) Validate() error {
	var size, sha, after error
	if p.PayloadSize < 0 {
		size = field("payload_size", "must not be negative")
	}
	if !isSHA256(p.PayloadSHA256) {
		sha = field("payload_sha256", "must be 64 hexadecimal digits")
	}
	if p.After.D() < lifecycle.MinRetentionPeriod {
		after = field("after", fmt.Sprintf("must be %s or more", lifecycle.MinRetentionPeriod))
	}
	return errors.Join(size, sha, after)
}

// RetentionArchived: the streams of a batch of settled messages, and older
// events of RetentionStream, were written to an archive file and left the
// journal, with the messages' rows, in the transaction that appended this
// event. It is the record of what left and why, and its totals are those
// of every batch up to it; the file's manifest lists each position.
type RetentionArchived struct {
	// Archive is the database's archive id, the name of its directory
	// under archive_dir.
	Archive uuid.UUID `json:"archive"`
	// ArchiveDir is the archive_dir the batch's files were written under,
	// which a later change of the setting does not move; empty in the
	// records of batches written before records named it.
	ArchiveDir string `json:"archive_dir,omitempty"`
	// Batch numbers the batches from 1, without a gap.
	Batch int64 `json:"batch"`
	// File and Manifest are the names of the batch's files in the
	// archive's directory, with their SHA-256 and the file's size.
	File           string `json:"file"`
	SHA256         string `json:"sha256"`
	Bytes          int64  `json:"bytes"`
	Manifest       string `json:"manifest"`
	ManifestSHA256 string `json:"manifest_sha256"`
	// Messages counts the messages that left and Events all the events,
	// Records the events of RetentionStream among them; FirstPosition and
	// LastPosition bound the events' positions.
	Messages      int   `json:"messages"`
	Events        int   `json:"events"`
	Records       int   `json:"records"`
	FirstPosition int64 `json:"first_position"`
	LastPosition  int64 `json:"last_position"`
	// Settled messages left by SettledAfter, Faulted ones by FailedAfter:
	// the periods in force.
	Settled      int                 `json:"settled"`
	Faulted      int                 `json:"faulted"`
	SettledAfter *lifecycle.Duration `json:"settled_after"`
	FailedAfter  *lifecycle.Duration `json:"failed_after"`
	// Total is what every batch up to this one removed.
	Total RetentionTotal `json:"total"`
}

// RetentionTotal sums batches of retention.
type RetentionTotal struct {
	Messages int64 `json:"messages"`
	Events   int64 `json:"events"`
	Settled  int64 `json:"settled"`
	Faulted  int64 `json:"faulted"`
}

func (*RetentionArchived) Kind() Kind { return KindRetentionArchived }
func (p *RetentionArchived) Text() string {
	return fmt.Sprintf("batch %d archived in %s: %s of %s (%d settled, %d faulted) and %d of retention's records left the journal",
		p.Batch, p.File, lifecycle.Count(p.Events-p.Records, "event", "events"), lifecycle.Count(p.Messages, "message", "messages"),
		p.Settled, p.Faulted, p.Records)
}
func (p *RetentionArchived) Validate() error {
	var errs []error
	errs = append(errs, required("archive", p.Archive != uuid.Nil))
	if p.ArchiveDir != "" && !filepath.IsAbs(p.ArchiveDir) {
		errs = append(errs, field("archive_dir", "must be an absolute path"))
	}
	if p.Batch < 1 {
		errs = append(errs, field("batch", "must be 1 or more"))
	}
	for _, f := range []struct{ name, file, sha string }{{"file", p.File, p.SHA256}, {"manifest", p.Manifest, p.ManifestSHA256}} {
		if f.file == "" || filepath.Base(f.file) != f.file || f.file == "." || f.file == ".." {
			errs = append(errs, field(f.name, "must be the name of a file, without a directory"))
		}
		if !isSHA256(f.sha) {
			errs = append(errs, field(f.name+"_sha256", "must be 64 hexadecimal digits"))
		}
	}
	if p.Bytes < 1 {
		errs = append(errs, field("bytes", "must be 1 or more"))
	}
	if p.Messages < 1 || p.Records < 0 || p.Events < p.Messages+p.Records {
		errs = append(errs, field("events", "must be 1 or more per message, and the records besides"))
	}
	if p.Settled < 0 || p.Faulted < 0 || p.Settled+p.Faulted != p.Messages {
		errs = append(errs, field("settled", "settled and faulted must add up to messages"))
	}
	if p.FirstPosition < 1 || p.LastPosition < p.FirstPosition {
		errs = append(errs, field("first_position", "must be 1 or more and not after last_position"))
	}
	t := p.Total
	if t.Messages < int64(p.Messages) || t.Events < int64(p.Events) || t.Settled < int64(p.Settled) || t.Faulted < int64(p.Faulted) ||
		t.Settled+t.Faulted != t.Messages || p.Batch == 1 && t != (RetentionTotal{int64(p.Messages), int64(p.Events), int64(p.Settled), int64(p.Faulted)}) {
		errs = append(errs, field("total", "must add this batch to those before it"))
	}
	return errors.Join(errs...)
}

// Add is the total with the batch p added.
func (t RetentionTotal) Add(p *RetentionArchived) RetentionTotal {
	return RetentionTotal{Messages: t.Messages + int64(p.Messages), Events: t.Events + int64(p.Events),
		Settled: t.Settled + int64(p.Settled), Faulted: t.Faulted + int64(p.Faulted)}
}

// RetentionPass: a pass of retention did something; the counts are its
// own.
type RetentionPass struct {
	Expunged     int   `json:"expunged"`
	Removed      int   `json:"removed"`
	Batches      int   `json:"batches"`
	ArchiveBytes int64 `json:"archive_bytes"`
}

func (*RetentionPass) Kind() Kind { return KindRetentionPass }
func (p *RetentionPass) Text() string {
	return fmt.Sprintf("retention pass: %s expunged, %s removed in %s, %s archived",
		lifecycle.Count(p.Expunged, "payload", "payloads"), lifecycle.Count(p.Removed, "message", "messages"),
		lifecycle.Count(p.Batches, "batch", "batches"), lifecycle.Count(p.ArchiveBytes, "byte", "bytes"))
}
func (p *RetentionPass) Validate() error {
	if p.Expunged < 0 || p.Removed < 0 || p.Batches < 0 || p.ArchiveBytes < 0 {
		return field("expunged", "the counts must not be negative")
	}
	if p.Expunged+p.Removed == 0 {
		return field("removed", "a pass that did nothing is not journaled")
	}
	return nil
}

// streamsSQL reads whole streams in position order, with the text of each
// event's txid first, as committedSQL does.
const streamsSQL = `SELECT txid::text AS txid_text, ` + columns + ` FROM journal
	WHERE stream = ANY($1::text[]) ORDER BY position`

// ReadStreams returns every event of the streams, in position order, and
// the mark of each, so a caller can tell which a feed group has passed.
func ReadStreams(ctx context.Context, q Querier, streams []string) ([]Event, []Mark, error) {
	events, marks, err := scanMarked(ctx, q, streamsSQL, streams)
	if err != nil {
		return nil, nil, fmt.Errorf("read %d streams: %w", len(streams), err)
	}
	return events, marks, nil
}

// recordsSQL reads the events of RetentionStream before a version and not
// after a time, on the (stream, version) index.
var recordsSQL = `SELECT txid::text AS txid_text, ` + columns + ` FROM journal
	WHERE stream = '` + RetentionStream + `' AND version < $1 AND recorded_at <= $2 ORDER BY version LIMIT $3`

// ReadRecords returns up to limit events of RetentionStream before version
// and recorded not after at, in order, with the mark of each: retention's
// records old enough to be archived in turn.
func ReadRecords(ctx context.Context, q Querier, version int, at time.Time, limit int) ([]Event, []Mark, error) {
	var (
		events []Event
		marks  []Mark
		txid   string
	)
	err := scan(ctx, q, recordsSQL, []any{version, at, limit}, func(e Event) error {
		id, err := strconv.ParseUint(txid, 10, 64)
		if err != nil {
			return fmt.Errorf("position %d: txid %q: %w", e.Position, txid, err)
		}
		events = append(events, e)
		marks = append(marks, Mark{TxID: id, Position: e.Position})
		return nil
	}, &txid)
	if err != nil {
		return nil, nil, fmt.Errorf("read retention's records: %w", err)
	}
	return events, marks, nil
}

// QueueRemoval queues on b the deletion of every event of the streams and
// of RetentionStream's events at the positions: the one statement that
// deletes from the journal. The journal refuses it (schema's
// journal_removal trigger) unless b's transaction appended before it a
// RetentionArchived event that counts exactly the events and messages
// deleted and bounds their positions, and it refuses any event of the
// config stream or of a bulk operation's. Only retention calls it.
func QueueRemoval(b *pgx.Batch, streams []string, records []int64) {
	b.Queue(`DELETE FROM journal WHERE stream = ANY($1::text[])
		OR stream = '`+RetentionStream+`' AND position = ANY($2::bigint[])`, streams, records)
}

// QueueCountLive queues on b the count, into dst, of the events at the
// positions and of the events of the streams (an event both at a position
// and of a stream counts twice): 0 when an archive's events are all gone.
func QueueCountLive(b *pgx.Batch, positions []int64, streams []string, dst *int) {
	b.Queue(`SELECT count(*) FROM (SELECT position FROM journal WHERE position = ANY($1::bigint[])
		UNION ALL SELECT position FROM journal WHERE stream = ANY($2::text[])) j`, positions, streams).
		QueryRow(func(row pgx.Row) error { return row.Scan(dst) })
}
