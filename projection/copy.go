package projection

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// copyFolded loads the fold into the projection tables, which tx created:
// the rows of the messages (copyMessages), then the targets' health, the
// kept counts (Tally), the lanes and the operations.
func copyFolded(ctx context.Context, tx pgx.Tx, f *Folded, p *pacer) error {
	// In the order the streams began, as the projector inserts them: the
	// rows lie in the table as they lie in memory, which keeps reading
	// them back to compare with the fold cheap. A paced copy goes a slice
	// of messages at a time, waiting between; the correlations go with
	// the last.
	step := len(f.inOrder)
	if p != nil {
		step = copySlice
	}
	for lo := 0; ; lo += step {
		hi := min(lo+step, len(f.inOrder))
		var correlations map[CorrelationKey]Correlation
		if hi == len(f.inOrder) {
			correlations = f.Correlations
		}
		if err := copyMessages(ctx, tx, f.inOrder[lo:hi], correlations, true); err != nil {
			return err
		}
		if hi == len(f.inOrder) {
			break
		}
		if err := p.pace(ctx); err != nil {
			return err
		}
	}
	if err := copyHealth(ctx, tx, f); err != nil {
		return err
	}
	b := &pgx.Batch{}
	tally := f.tally()
	tally.Queue(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store the counts: %w", err)
	}
	if err := copyLanes(ctx, tx, f.lanes.All()); err != nil {
		return err
	}
	return copyOperations(ctx, tx, f.opsInOrder)
}

// copySlice is how many messages a paced copyFolded copies at a time,
// their deliveries and callbacks with them: a few milliseconds' work.
const copySlice = 2048

// copyHealth writes the fold's health of each target: a handful of rows,
// one per target with a health stream.
func copyHealth(ctx context.Context, tx pgx.Tx, f *Folded) error {
	if len(f.health) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, target := range slices.Sorted(maps.Keys(f.health)) {
		b.Queue(`INSERT INTO target_health (target) VALUES ($1)`, target)
		QueueWriteHealth(b, *f.health[target])
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write target health: %w", err)
	}
	return nil
}

// copyMessages loads messages, their deliveries and callbacks and the
// correlations with COPY in PostgreSQL's binary format (encoded without
// pgx's per-value work); with FREEZE when tx created the tables, so the
// rows need no visibility checks later.
func copyMessages(ctx context.Context, tx pgx.Tx, messages []*Message, correlations map[CorrelationKey]Correlation, freeze bool) error {
	i := 0
	err := copyIn(ctx, tx, "messages", messageCopyColumns, freeze, func(b *copyRow) bool {
		if i == len(messages) {
			return false
		}
		m := messages[i]
		i++
		b.begin(len(messageCopyColumns))
		b.uuid(m.ID)
		b.int4(m.RowVersion)
		b.text(m.Source)
		b.text(m.From)
		b.text(m.To)
		b.text(m.ContentType)
		b.nullText(m.IdempotencyKey)
		b.nullText(m.OrderingKey)
		b.nullText(m.DuplicateKey)
		b.nullUUID(m.PossibleDuplicateOf)
		b.nullText(m.Type)
		b.int4(m.Generation)
		b.int8(m.PayloadSize)
		b.text(m.PayloadSHA256)
		b.text(string(m.Stage))
		b.nullText(string(m.Refusal))
		b.text(string(m.Status))
		b.text(m.Error)
		b.int4(m.currentDeliveries())
		b.time(m.CreatedAt)
		b.time(m.RowUpdatedAt)
		b.bool(m.PayloadExpunged)
		b.nullText(m.Trace.Parent)
		b.nullText(m.Trace.State)
		b.nullText(m.Trace.Baggage)
		if h := headersJSON(m.Headers); h != nil {
			b.jsonb(h)
		} else {
			b.null()
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("copy messages: %w", err)
	}
	i, j := 0, 0
	err = copyIn(ctx, tx, "deliveries", deliveryCopyColumns, freeze, func(b *copyRow) bool {
		for i < len(messages) && j == len(messages[i].Deliveries) {
			i, j = i+1, 0
		}
		if i == len(messages) {
			return false
		}
		d := &messages[i].Deliveries[j]
		j++
		b.begin(len(deliveryCopyColumns))
		b.nullUUID(d.ID)
		b.nullUUID(d.MessageID)
		b.time(d.MessageCreatedAt)
		b.int4(d.Seq)
		b.int4(d.Version)
		b.int4(d.Generation)
		b.text(d.Target)
		b.nullText(d.LaneKey)
		b.int8(d.LaneSeq)
		b.bool(d.LaneContinue)
		b.text(string(d.State))
		b.int4(d.Attempts)
		b.int4(d.DispatchCount)
		b.int4(d.Redeliveries)
		b.nullTime(d.RedeliveredAt)
		b.int4(d.RedeliveredAttempts)
		b.nullTime(d.NextDue)
		b.nullUUID(d.ClaimToken)
		b.nullTime(d.LeaseEnd)
		b.text(d.LastError)
		b.time(d.CreatedAt)
		b.time(d.UpdatedAt)
		b.nullTime(d.FinishedAt)
		b.bool(d.Shaped)
		return true
	})
	if err != nil {
		return fmt.Errorf("copy deliveries: %w", err)
	}
	keys := slices.SortedFunc(maps.Keys(correlations), compareKeys)
	err = copyIn(ctx, tx, "correlations", correlationCopyColumns, freeze, func(b *copyRow) bool {
		if len(keys) == 0 {
			return false
		}
		k := keys[0]
		keys = keys[1:]
		c := correlations[k]
		b.begin(len(correlationCopyColumns))
		b.text(k.Target)
		b.text(k.ExternalID)
		b.uuid(c.DeliveryID)
		b.uuid(c.MessageID)
		b.bool(c.Consumed)
		return true
	})
	if err != nil {
		return fmt.Errorf("copy correlations: %w", err)
	}
	if err := copyCallbacks(ctx, tx, messages, freeze); err != nil {
		return fmt.Errorf("copy callbacks: %w", err)
	}
	return nil
}

var messageCopyColumns = []string{"id", "version", "source", "from_party", "to_party", "content_type",
	"idempotency_key", "ordering_key", "duplicate_key", "possible_duplicate_of", "type", "generation", "payload_size", "payload_sha256", "stage", "refusal", "status", "error", "delivery_count",
	"created_at", "updated_at", "payload_expunged", "traceparent", "tracestate", "baggage", "headers"}

var deliveryCopyColumns = []string{"id", "message_id", "message_created_at", "seq", "version", "generation", "target", "lane_key", "lane_seq", "lane_continue", "state", "attempts",
	"dispatch_count", "redeliveries", "redelivered_at", "redelivered_attempts", "next_due", "claim_token",
	"lease_end", "last_error", "created_at", "updated_at", "finished_at", "shaped"}

var correlationCopyColumns = []string{"target", "external_id", "delivery_id", "message_id", "consumed"}

// copyIn runs COPY … FROM STDIN (FORMAT binary) into table, FREEZE when
// freeze is set, with the rows row appends until it returns false.
func copyIn(ctx context.Context, tx pgx.Tx, table string, columns []string, freeze bool, row func(*copyRow) bool) error {
	options := "FORMAT binary"
	if freeze {
		options += ", FREEZE"
	}
	sql := "COPY " + pgx.Identifier{table}.Sanitize() + " (" + strings.Join(columns, ", ") + ") FROM STDIN (" + options + ")"
	r := &copyReader{row: row}
	r.b.buf = append(r.b.buf, "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00"...)
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, r, sql); err != nil {
		return err
	}
	return r.b.err
}

// copyReader is the COPY data, encoded a batch of rows at a time as the
// connection reads it.
type copyReader struct {
	b    copyRow
	off  int
	row  func(*copyRow) bool
	done bool
}

func (r *copyReader) Read(p []byte) (int, error) {
	for r.off == len(r.b.buf) {
		if r.done || r.b.err != nil {
			return 0, io.EOF
		}
		r.b.buf, r.off = r.b.buf[:0], 0
		for len(r.b.buf) < 64<<10 && r.b.err == nil {
			if !r.row(&r.b) {
				r.b.buf = binary.BigEndian.AppendUint16(r.b.buf, 0xffff)
				r.done = true
				break
			}
		}
		if r.b.err != nil {
			// Stop short: the COPY fails on the truncated data, and
			// copyIn returns this error.
			return 0, r.b.err
		}
	}
	n := copy(p, r.b.buf[r.off:])
	r.off += n
	return n, nil
}

// copyRow appends the fields of rows in the binary COPY format: each row
// its field count, each field its length (-1 for NULL) and its bytes.
type copyRow struct {
	buf []byte
	err error
}

func (b *copyRow) begin(fields int) { b.buf = binary.BigEndian.AppendUint16(b.buf, uint16(fields)) }

func (b *copyRow) null() { b.buf = binary.BigEndian.AppendUint32(b.buf, math.MaxUint32) }

func (b *copyRow) uuid(id uuid.UUID) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, 16)
	b.buf = append(b.buf, id[:]...)
}

// nullUUID writes the zero id as NULL.
func (b *copyRow) nullUUID(id uuid.UUID) {
	if id == uuid.Nil {
		b.null()
		return
	}
	b.uuid(id)
}

func (b *copyRow) int4(n int) {
	if n < math.MinInt32 || n > math.MaxInt32 {
		b.err = fmt.Errorf("%d is out of range for an int column", n)
	}
	b.buf = binary.BigEndian.AppendUint32(b.buf, 4)
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(int32(n)))
}

// jsonb writes a jsonb value: its format version, 1, and the text.
func (b *copyRow) jsonb(data []byte) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(len(data)+1))
	b.buf = append(append(b.buf, 1), data...)
}

func (b *copyRow) int8(n int64) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, 8)
	b.buf = binary.BigEndian.AppendUint64(b.buf, uint64(n))
}

func (b *copyRow) bool(v bool) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, 1)
	if v {
		b.buf = append(b.buf, 1)
	} else {
		b.buf = append(b.buf, 0)
	}
}

func (b *copyRow) text(s string) {
	if len(s) > math.MaxInt32 {
		b.err = fmt.Errorf("a text of %d bytes is too long", len(s))
	}
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(len(s)))
	b.buf = append(b.buf, s...)
}

// nullText writes "" as NULL.
func (b *copyRow) nullText(s string) {
	if s == "" {
		b.null()
		return
	}
	b.text(s)
}

// y2k is PostgreSQL's epoch, in microseconds since Unix's.
const y2k = 946_684_800_000_000

// time writes a timestamptz: microseconds since 2000, the nanoseconds cut
// off as pgx cuts them.
func (b *copyRow) time(t time.Time) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, 8)
	b.buf = binary.BigEndian.AppendUint64(b.buf, uint64(t.Unix()*1_000_000+int64(t.Nanosecond())/1000-y2k))
}

// nullTime writes the zero time as NULL.
func (b *copyRow) nullTime(t time.Time) {
	if t.IsZero() {
		b.null()
		return
	}
	b.time(t)
}
