package feed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// encodedEvent is a journal row as the feed's message payload carries it.
type encodedEvent struct {
	position   int64
	recordedAt time.Time
	stream     string
	version    int32
	deliveryID pgtype.UUID
	target     string
	kind       string
	actor      string
	oldState   string
	newState   string
	payload    []byte
}

// maxEventHeader bounds what appendEvent writes besides the texts' and
// the payload's bytes (three varints, the delivery id's flag and bytes,
// seven lengths), for sizing a buffer; a larger event would only grow it.
const maxEventHeader = 3*binary.MaxVarintLen64 + 1 + 16 + 7*binary.MaxVarintLen64

// appendEvent appends e to b: position, time (Unix microseconds, the
// precision PostgreSQL stores) and version as varints, a byte that says
// whether a delivery id of 16 bytes follows, then the texts and the
// payload, each its length as a uvarint and its bytes. The encoding lives
// only between the feed's query and its consumer in one process, so it
// needs no version of its own.
func appendEvent(b []byte, e encodedEvent) []byte {
	b = binary.AppendVarint(b, e.position)
	b = binary.AppendVarint(b, e.recordedAt.UnixMicro())
	b = binary.AppendVarint(b, int64(e.version))
	if e.deliveryID.Valid {
		b = append(b, 1)
		b = append(b, e.deliveryID.Bytes[:]...)
	} else {
		b = append(b, 0)
	}
	for _, s := range []string{e.stream, e.target, e.kind, e.actor, e.oldState, e.newState} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(e.payload)))
	return append(b, e.payload...)
}

var errTruncated = errors.New("truncated")

// eventReader reads what appendEvent wrote.
type eventReader struct {
	b   []byte
	err error
}

func (r *eventReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *eventReader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.fail()
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *eventReader) text() []byte {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.fail()
		return nil
	}
	r.b = r.b[k:]
	return r.bytes(int(n))
}

func (r *eventReader) fail() {
	if r.err == nil {
		r.err = errTruncated
	}
	r.b = nil
}

// decodeEvents decodes the events of one message, with the journal's own
// payload decoding and envelope check.
func decodeEvents(b []byte) ([]journal.Event, error) {
	var events []journal.Event
	r := eventReader{b: b}
	for len(r.b) > 0 {
		var e journal.Event
		e.Position = r.varint()
		e.RecordedAt = time.UnixMicro(r.varint()).UTC()
		e.Version = int(r.varint())
		if flag := r.bytes(1); len(flag) == 1 && flag[0] == 1 {
			if id := r.bytes(16); len(id) == 16 {
				e.DeliveryID = uuid.UUID(id)
			}
		}
		e.Stream = string(r.text())
		e.Target = string(r.text())
		kind := journal.Kind(r.text())
		e.Actor = string(r.text())
		e.OldState = lifecycle.DeliveryState(r.text())
		e.NewState = lifecycle.DeliveryState(r.text())
		payload := r.text()
		if r.err != nil {
			return nil, fmt.Errorf("read event after position %d: %w", e.Position, r.err)
		}
		var err error
		if e.Payload, err = journal.Decode(kind, payload); err != nil {
			return nil, fmt.Errorf("position %d: %w", e.Position, err)
		}
		if err := e.CheckEnvelope(); err != nil {
			return nil, fmt.Errorf("position %d: %w", e.Position, err)
		}
		events = append(events, e)
	}
	return events, nil
}
