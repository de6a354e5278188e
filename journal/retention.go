package journal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
)

// RetentionStream is the stream of retention's own record: what left the
// journal, in which archive file, and each pass's counts. Like
// ConfigStream it is never removed.
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
	return fmt.Sprintf("payload expunged %s after the message settled: %d bytes, sha256 %s", p.After, p.PayloadSize, p.PayloadSHA256)
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

// RetentionArchived: the streams of a batch of settled messages were
// written to an archive file and left the journal, with the messages'
// rows, in the transaction that appended this event. It is the record of
// what left and why; the file's manifest lists each position.
type RetentionArchived struct {
	// Archive is the database's archive id, the name of its directory
	// under archive_dir.
	Archive uuid.UUID `json:"archive"`
	// Batch numbers the batches from 1, without a gap.
	Batch int64 `json:"batch"`
	// File and Manifest are the names of the batch's files in the
	// archive's directory, with their SHA-256 and the file's size.
	File           string `json:"file"`
	SHA256         string `json:"sha256"`
	Bytes          int64  `json:"bytes"`
	Manifest       string `json:"manifest"`
	ManifestSHA256 string `json:"manifest_sha256"`
	// Messages and Events count what left; FirstPosition and LastPosition
	// bound the events' positions.
	Messages      int   `json:"messages"`
	Events        int   `json:"events"`
	FirstPosition int64 `json:"first_position"`
	LastPosition  int64 `json:"last_position"`
	// Settled messages left by SettledAfter, Faulted ones by FailedAfter:
	// the periods in force.
	Settled      int                 `json:"settled"`
	Faulted      int                 `json:"faulted"`
	SettledAfter *lifecycle.Duration `json:"settled_after"`
	FailedAfter  *lifecycle.Duration `json:"failed_after"`
}

func (*RetentionArchived) Kind() Kind { return KindRetentionArchived }
func (p *RetentionArchived) Text() string {
	return fmt.Sprintf("batch %d archived in %s: %d events of %d messages (%d settled, %d faulted) left the journal",
		p.Batch, p.File, p.Events, p.Messages, p.Settled, p.Faulted)
}
func (p *RetentionArchived) Validate() error {
	var errs []error
	errs = append(errs, required("archive", p.Archive != uuid.Nil))
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
	if p.Messages < 1 || p.Events < p.Messages {
		errs = append(errs, field("events", "must be 1 or more per message"))
	}
	if p.Settled < 0 || p.Faulted < 0 || p.Settled+p.Faulted != p.Messages {
		errs = append(errs, field("settled", "settled and faulted must add up to messages"))
	}
	if p.FirstPosition < 1 || p.LastPosition < p.FirstPosition {
		errs = append(errs, field("first_position", "must be 1 or more and not after last_position"))
	}
	return errors.Join(errs...)
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
	return fmt.Sprintf("retention pass: %d payloads expunged, %d messages removed in %d batches, %d bytes archived",
		p.Expunged, p.Removed, p.Batches, p.ArchiveBytes)
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
	var (
		events []Event
		marks  []Mark
		txid   string
	)
	err := scan(ctx, q, streamsSQL, []any{streams}, func(e Event) error {
		id, err := strconv.ParseUint(txid, 10, 64)
		if err != nil {
			return fmt.Errorf("position %d: txid %q: %w", e.Position, txid, err)
		}
		events = append(events, e)
		marks = append(marks, Mark{TxID: id, Position: e.Position})
		return nil
	}, &txid)
	if err != nil {
		return nil, nil, fmt.Errorf("read %d streams: %w", len(streams), err)
	}
	return events, marks, nil
}

// QueueRemoval queues on b the deletion of every event of the streams:
// the one statement that deletes from the journal. The journal refuses it
// (schema's journal_removal trigger) unless b's transaction appended before
// it a RetentionArchived event that counts exactly the events and messages
// deleted and bounds their positions, and it refuses any event of the
// config and retention streams. Only retention calls it.
func QueueRemoval(b *pgx.Batch, streams []string) {
	b.Queue(`DELETE FROM journal WHERE stream = ANY($1::text[])`, streams)
}
