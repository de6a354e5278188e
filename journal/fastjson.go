package journal

import (
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// The audit and the rebuild decode every payload of the journal, and
// encoding/json, which reflects over each field, is most of their time. So
// the payloads of message and delivery events have a decoder of their own,
// decodeFast, that reads the plain JSON Encode writes and PostgreSQL gives
// back: an object whose keys are exactly the fields' names, each once, whose
// strings have no escapes and are valid UTF-8, whose integers have no
// fraction or exponent and whose values are never null (but a dispatch's
// deliveries). It gives up on
// anything else, and Decode then uses encoding/json, which decides; so the
// fast decoder must never accept what encoding/json would read otherwise.
// For the values of types that decode themselves (times, ids, outcome kinds,
// refusals) it calls the same methods encoding/json would. FuzzDecodeFast
// holds it to that.

// fastPayload is a payload with a fast decoder.
type fastPayload interface {
	Payload
	decodeFast(d *fastDecoder)
}

// decodeFast decodes data into p and reports whether it could. When it
// could not, p may be partly filled.
func decodeFast(p fastPayload, data []byte) bool {
	d := fastDecoder{data: data}
	p.decodeFast(&d)
	d.space()
	return !d.failed && d.i == len(d.data)
}

type fastDecoder struct {
	data   []byte
	i      int
	failed bool
}

// object is the state of one JSON object being read: the fields seen.
type object struct {
	seen uint32
	n    int
}

func (d *fastDecoder) fail() { d.failed = true }

func (d *fastDecoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, 0 at the end.
func (d *fastDecoder) next() byte {
	d.space()
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

// begin reads the opening brace of an object.
func (d *fastDecoder) begin() object {
	if d.next() != '{' {
		d.fail()
		return object{}
	}
	d.i++
	return object{}
}

// field reads the next key of the object o and its colon and returns the
// key's index in names; -1 after the closing brace, or on a failure: an
// unknown key, a key seen before, or anything but a key.
func (d *fastDecoder) field(o *object, names ...string) int {
	if d.failed {
		return -1
	}
	c := d.next()
	if c == '}' {
		d.i++
		return -1
	}
	if o.n > 0 {
		if c != ',' {
			d.fail()
			return -1
		}
		d.i++
		d.space()
	}
	key := d.rawString()
	if d.failed || d.next() != ':' {
		d.fail()
		return -1
	}
	d.i++
	for k, name := range names {
		if string(key) == name {
			if o.seen&(1<<k) != 0 {
				break
			}
			o.seen |= 1 << k
			o.n++
			return k
		}
	}
	d.fail()
	return -1
}

// rawString reads a string with no escapes and no control characters and
// returns what is between its quotes.
func (d *fastDecoder) rawString() []byte {
	if d.next() != '"' {
		d.fail()
		return nil
	}
	start := d.i + 1
	for j := start; j < len(d.data); j++ {
		switch c := d.data[j]; {
		case c == '"':
			d.i = j + 1
			return d.data[start:j]
		case c == '\\' || c < 0x20:
			d.fail()
			return nil
		}
	}
	d.fail()
	return nil
}

// text reads a string value that is valid UTF-8.
func (d *fastDecoder) text() []byte {
	s := d.rawString()
	if !d.failed && !utf8.Valid(s) {
		d.fail()
	}
	return s
}

func (d *fastDecoder) string(p *string) {
	if s := d.text(); !d.failed {
		*p = string(s)
	}
}

// unmarshalText reads a string into a type that decodes itself from text,
// as encoding/json does.
func (d *fastDecoder) unmarshalText(p interface{ UnmarshalText([]byte) error }) {
	if s := d.text(); !d.failed && p.UnmarshalText(s) != nil {
		d.fail()
	}
}

func (d *fastDecoder) uuid(p *uuid.UUID) { d.unmarshalText(p) }

// time reads a string into a time with the time's own UnmarshalJSON, which
// is what encoding/json calls.
func (d *fastDecoder) time(p *time.Time) {
	d.space()
	begin := d.i
	if d.text(); !d.failed && p.UnmarshalJSON(d.data[begin:d.i]) != nil {
		d.fail()
	}
}

// int64 reads an integer of at most 18 digits, with no fraction or
// exponent; anything longer is left to encoding/json.
func (d *fastDecoder) int64() int64 {
	d.space()
	j, neg := d.i, false
	if j < len(d.data) && d.data[j] == '-' {
		neg = true
		j++
	}
	start := j
	var n int64
	for j < len(d.data) && d.data[j] >= '0' && d.data[j] <= '9' {
		n = n*10 + int64(d.data[j]-'0')
		j++
	}
	digits := j - start
	switch {
	case digits == 0 || digits > 18 || (digits > 1 && d.data[start] == '0'):
		d.fail()
		return 0
	case j < len(d.data) && (d.data[j] == '.' || d.data[j] == 'e' || d.data[j] == 'E'):
		d.fail()
		return 0
	}
	d.i = j
	if neg {
		return -n
	}
	return n
}

func (d *fastDecoder) int(p *int) {
	if n := d.int64(); !d.failed {
		*p = int(n)
	}
}

func (d *fastDecoder) int64p(p *int64) {
	if n := d.int64(); !d.failed {
		*p = n
	}
}

// null reads a null if one is next.
func (d *fastDecoder) null() bool {
	if d.next() != 'n' || len(d.data)-d.i < 4 || string(d.data[d.i:d.i+4]) != "null" {
		return false
	}
	d.i += 4
	return true
}

func (d *fastDecoder) bool(p *bool) {
	d.space()
	rest := d.data[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*p, d.i = true, d.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*p, d.i = false, d.i+5
	default:
		d.fail()
		return
	}
	// A literal runs into no letter or digit: "truex" is not true.
	if d.i < len(d.data) {
		if c := d.data[d.i]; c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			d.fail()
		}
	}
}

func (p *MessageAccepted) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "source", "from", "to", "content_type", "payload_size", "payload_sha256", "idempotency_key",
			"ordering_key", "duplicate_key", "possible_duplicate_of", "callback_url") {
		case 0:
			d.string(&p.Source)
		case 1:
			d.string(&p.From)
		case 2:
			d.string(&p.To)
		case 3:
			d.string(&p.ContentType)
		case 4:
			if n := d.int64(); !d.failed {
				p.PayloadSize = n
			}
		case 5:
			d.string(&p.PayloadSHA256)
		case 6:
			d.string(&p.IdempotencyKey)
		case 7:
			d.string(&p.OrderingKey)
		case 8:
			d.string(&p.DuplicateKey)
		case 9:
			d.uuid(&p.PossibleDuplicateOf)
		case 10:
			d.string(&p.CallbackURL)
		default:
			return
		}
	}
}

func (p *NewDeliveries) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "deliveries", "next_due") {
		case 0:
			p.decodeDeliveries(d)
		case 1:
			d.time(&p.NextDue)
		default:
			return
		}
	}
}

// decodeDeliveries reads the list of new deliveries: null (a dispatch that
// matched nothing) or an array.
func (p *NewDeliveries) decodeDeliveries(d *fastDecoder) {
	if d.null() {
		p.Deliveries = nil
		return
	}
	if d.next() != '[' {
		d.fail()
		return
	}
	d.i++
	// encoding/json makes an empty array an empty slice, not nil.
	p.Deliveries = []NewDelivery{}
	for i := 0; !d.failed; i++ {
		if d.next() == ']' {
			d.i++
			return
		}
		if i > 0 {
			if d.next() != ',' {
				d.fail()
				return
			}
			d.i++
		}
		var nd NewDelivery
		nd.decodeFast(d)
		p.Deliveries = append(p.Deliveries, nd)
	}
}

// uuids reads an array of ids; null is nil, as encoding/json reads it.
func (d *fastDecoder) uuids() []uuid.UUID {
	if d.null() {
		return nil
	}
	if d.next() != '[' {
		d.fail()
		return nil
	}
	d.i++
	out := []uuid.UUID{}
	for i := 0; !d.failed; i++ {
		if d.next() == ']' {
			d.i++
			return out
		}
		if i > 0 {
			if d.next() != ',' {
				d.fail()
				return nil
			}
			d.i++
		}
		var id uuid.UUID
		d.uuid(&id)
		out = append(out, id)
	}
	return nil
}

func (p *NewDelivery) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "id", "seq", "target", "lane_seq", "blocked", "continue") {
		case 0:
			d.uuid(&p.ID)
		case 1:
			d.int(&p.Seq)
		case 2:
			d.string(&p.Target)
		case 3:
			d.int64p(&p.LaneSeq)
		case 4:
			d.bool(&p.Blocked)
		case 5:
			d.bool(&p.Continue)
		default:
			return
		}
	}
}

func (p *MessageDispatched) decodeFast(d *fastDecoder) { p.NewDeliveries.decodeFast(d) }

func (p *MessageRedispatched) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "deliveries", "next_due", "operation") {
		case 0:
			p.decodeDeliveries(d)
		case 1:
			d.time(&p.NextDue)
		case 2:
			d.uuid(&p.Operation)
		default:
			return
		}
	}
}

func (p *MessageResent) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "generation", "replay", "superseded", "deliveries", "next_due", "reason", "operation") {
		case 0:
			d.int(&p.Generation)
		case 1:
			d.bool(&p.Replay)
		case 2:
			p.Superseded = d.uuids()
		case 3:
			p.decodeDeliveries(d)
		case 4:
			d.time(&p.NextDue)
		case 5:
			d.string(&p.Reason)
		case 6:
			d.uuid(&p.Operation)
		default:
			return
		}
	}
}

func (p *MessageRefused) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "refusal", "reason") {
		case 0:
			d.unmarshalText(&p.Refusal)
		case 1:
			d.string(&p.Reason)
		default:
			return
		}
	}
}

func (p *DeliveryWoken) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "dispatch_count", "next_due") {
		case 0:
			d.int(&p.DispatchCount)
		case 1:
			d.time(&p.NextDue)
		default:
			return
		}
	}
}

func (p *DeliveryClaimed) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "token", "attempt", "lease_end") {
		case 0:
			d.uuid(&p.Token)
		case 1:
			d.int(&p.Attempt)
		case 2:
			d.time(&p.LeaseEnd)
		default:
			return
		}
	}
}

func (p *DeliveryAttempted) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "token", "attempt", "outcome") {
		case 0:
			d.uuid(&p.Token)
		case 1:
			d.int(&p.Attempt)
		case 2:
			decodeOutcome(d, &p.Outcome)
		default:
			return
		}
	}
}

func decodeOutcome(d *fastDecoder, p *lifecycle.Outcome) {
	o := d.begin()
	for {
		switch d.field(&o, "kind", "text", "retry_at", "deadline", "external_id") {
		case 0:
			d.unmarshalText(&p.Kind)
		case 1:
			d.string(&p.Text)
		case 2:
			d.time(&p.RetryAt)
		case 3:
			d.time(&p.Deadline)
		case 4:
			d.string(&p.ExternalID)
		default:
			return
		}
	}
}

func (p *DeliveryReleased) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "token", "started", "reason") {
		case 0:
			d.uuid(&p.Token)
		case 1:
			d.bool(&p.Started)
		case 2:
			d.string(&p.Reason)
		default:
			return
		}
	}
}

func (p *DeliveryLeaseExpired) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "token", "lease_end") {
		case 0:
			d.uuid(&p.Token)
		case 1:
			d.time(&p.LeaseEnd)
		default:
			return
		}
	}
}

func (p *DeliveryStalled) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "wake_ups", "reason") {
		case 0:
			d.int(&p.WakeUps)
		case 1:
			d.string(&p.Reason)
		default:
			return
		}
	}
}

func (p *ReceiptReceived) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "positive", "detail", "external_id", "status", "code") {
		case 0:
			d.bool(&p.Positive)
		case 1:
			d.string(&p.Detail)
		case 2:
			d.string(&p.ExternalID)
		case 3:
			d.string(&p.Status)
		case 4:
			d.string(&p.Code)
		default:
			return
		}
	}
}

func (p *ReceiptRefused) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "positive", "detail", "reason", "external_id", "status", "code") {
		case 0:
			d.bool(&p.Positive)
		case 1:
			d.string(&p.Detail)
		case 2:
			d.string(&p.Reason)
		case 3:
			d.string(&p.ExternalID)
		case 4:
			d.string(&p.Status)
		case 5:
			d.string(&p.Code)
		default:
			return
		}
	}
}

func (p *ReceiptIntermediate) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "detail", "external_id", "status", "code") {
		case 0:
			d.string(&p.Detail)
		case 1:
			d.string(&p.ExternalID)
		case 2:
			d.string(&p.Status)
		case 3:
			d.string(&p.Code)
		default:
			return
		}
	}
}

func (p *ReceiptTimedOut) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "deadline", "reason") {
		case 0:
			d.time(&p.Deadline)
		case 1:
			d.string(&p.Reason)
		default:
			return
		}
	}
}

func (p *DeliveryRedelivered) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "dispatch_count", "next_due", "lane_seq", "blocked", "continue", "operation") {
		case 0:
			d.int(&p.DispatchCount)
		case 1:
			d.time(&p.NextDue)
		case 2:
			d.int64p(&p.LaneSeq)
		case 3:
			d.bool(&p.Blocked)
		case 4:
			d.bool(&p.Continue)
		case 5:
			d.uuid(&p.Operation)
		default:
			return
		}
	}
}

func (p *DeliveryUnblocked) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "dispatch_count", "next_due", "after") {
		case 0:
			d.int(&p.DispatchCount)
		case 1:
			d.time(&p.NextDue)
		case 2:
			d.uuid(&p.After)
		default:
			return
		}
	}
}

func (p *DeliverySkipped) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "reason", "operation") {
		case 0:
			d.string(&p.Reason)
		case 1:
			d.uuid(&p.Operation)
		default:
			return
		}
	}
}

func (p *DeliveryLaneHeld) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "waiting", "since") {
		case 0:
			d.int64p(&p.Waiting)
		case 1:
			d.time(&p.Since)
		default:
			return
		}
	}
}

func (p *CallbackClaimed) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "seq", "token", "attempt", "lease_end") {
		case 0:
			d.int(&p.Seq)
		case 1:
			d.uuid(&p.Token)
		case 2:
			d.int(&p.Attempt)
		case 3:
			d.time(&p.LeaseEnd)
		default:
			return
		}
	}
}

func (p *CallbackAttempted) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "seq", "token", "attempt", "outcome") {
		case 0:
			d.int(&p.Seq)
		case 1:
			d.uuid(&p.Token)
		case 2:
			d.int(&p.Attempt)
		case 3:
			decodeOutcome(d, &p.Outcome)
		default:
			return
		}
	}
}

func (p *CallbackReleased) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "seq", "token", "started", "reason") {
		case 0:
			d.int(&p.Seq)
		case 1:
			d.uuid(&p.Token)
		case 2:
			d.bool(&p.Started)
		case 3:
			d.string(&p.Reason)
		default:
			return
		}
	}
}

func (p *CallbackLeaseExpired) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "seq", "token", "lease_end") {
		case 0:
			d.int(&p.Seq)
		case 1:
			d.uuid(&p.Token)
		case 2:
			d.time(&p.LeaseEnd)
		default:
			return
		}
	}
}

func (p *MessagePayloadExpunged) decodeFast(d *fastDecoder) {
	o := d.begin()
	for {
		switch d.field(&o, "payload_size", "payload_sha256", "after") {
		case 0:
			if n := d.int64(); !d.failed {
				p.PayloadSize = n
			}
		case 1:
			d.string(&p.PayloadSHA256)
		case 2:
			d.unmarshalText(&p.After)
		default:
			return
		}
	}
}
