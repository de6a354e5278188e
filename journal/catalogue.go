package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/lifecycle"
)

// Kind names one type of event. The set is closed: Decode refuses any other.
type Kind string

// The event kinds.
const (
	KindMessageAccepted     Kind = "message.accepted"
	KindMessageDispatched   Kind = "message.dispatched"
	KindMessageRefused      Kind = "message.refused"
	KindMessageRedispatched Kind = "message.redispatched"
	KindMessageResent       Kind = "message.resent"

	KindCallbackClaimed      Kind = "message.callback_claimed"
	KindCallbackAttempted    Kind = "message.callback_attempted"
	KindCallbackReleased     Kind = "message.callback_released"
	KindCallbackLeaseExpired Kind = "message.callback_lease_expired"

	KindDeliveryWoken        Kind = "delivery.woken"
	KindDeliveryClaimed      Kind = "delivery.claimed"
	KindDeliveryAttempted    Kind = "delivery.attempted"
	KindDeliveryReleased     Kind = "delivery.released"
	KindDeliveryLeaseExpired Kind = "delivery.lease_expired"
	KindDeliveryStalled      Kind = "delivery.stalled"
	KindReceiptReceived      Kind = "delivery.receipt_received"
	KindReceiptRefused       Kind = "delivery.receipt_refused"
	KindReceiptTimedOut      Kind = "delivery.receipt_timed_out"
	KindDeliveryRedelivered  Kind = "delivery.redelivered"
	KindDeliveryUnblocked    Kind = "delivery.unblocked"
	KindDeliverySkipped      Kind = "delivery.skipped"
	KindDeliveryLaneHeld     Kind = "delivery.lane_held"
	KindReceiptIntermediate  Kind = "delivery.receipt_intermediate"
	KindDeliveryDue          Kind = "delivery.due"

	KindRouteCreated     Kind = "route.created"
	KindRouteUpdated     Kind = "route.updated"
	KindRouteDeleted     Kind = "route.deleted"
	KindTargetCreated    Kind = "target.created"
	KindTargetUpdated    Kind = "target.updated"
	KindTargetDeleted    Kind = "target.deleted"
	KindTargetKeyAdded   Kind = "target.key_added"
	KindSettingsChanged  Kind = "settings.changed"
	KindSourceCreated    Kind = "source.created"
	KindSourceUpdated    Kind = "source.updated"
	KindSourceDeleted    Kind = "source.deleted"
	KindSourceHolePassed Kind = "source.hole_passed"

	// What a target's receiver answered that changes the target, on
	// ConfigStream.
	KindTargetDisabled Kind = "target.disabled"

	// A target's health stream (TargetStream).
	KindBreakerOpened     Kind = "target.breaker_opened"
	KindBreakerHalfOpened Kind = "target.breaker_half_opened"
	KindBreakerClosed     Kind = "target.breaker_closed"
	KindTargetThrottled   Kind = "target.throttled"

	// Retention's (docs/retention.md): the first belongs to a message's
	// stream, the others to RetentionStream.
	KindMessagePayloadExpunged Kind = "message.payload_expunged"
	KindRetentionArchived      Kind = "retention.archived"
	KindRetentionPass          Kind = "retention.pass"

	// A bulk operation's (OperationStream).
	KindOperationCreated    Kind = "operation.created"
	KindOperationMatched    Kind = "operation.matched"
	KindOperationProgressed Kind = "operation.progressed"
	KindOperationCancelled  Kind = "operation.cancelled"
	KindOperationFinished   Kind = "operation.finished"
)

// catalogue maps each kind to a constructor of its payload.
var catalogue = map[Kind]func() Payload{
	KindMessageAccepted:      func() Payload { return new(MessageAccepted) },
	KindMessageDispatched:    func() Payload { return new(MessageDispatched) },
	KindMessageRefused:       func() Payload { return new(MessageRefused) },
	KindMessageRedispatched:  func() Payload { return new(MessageRedispatched) },
	KindMessageResent:        func() Payload { return new(MessageResent) },
	KindDeliveryWoken:        func() Payload { return new(DeliveryWoken) },
	KindDeliveryClaimed:      func() Payload { return new(DeliveryClaimed) },
	KindDeliveryAttempted:    func() Payload { return new(DeliveryAttempted) },
	KindDeliveryReleased:     func() Payload { return new(DeliveryReleased) },
	KindDeliveryLeaseExpired: func() Payload { return new(DeliveryLeaseExpired) },
	KindDeliveryStalled:      func() Payload { return new(DeliveryStalled) },
	KindReceiptReceived:      func() Payload { return new(ReceiptReceived) },
	KindReceiptRefused:       func() Payload { return new(ReceiptRefused) },
	KindReceiptTimedOut:      func() Payload { return new(ReceiptTimedOut) },
	KindDeliveryRedelivered:  func() Payload { return new(DeliveryRedelivered) },
	KindDeliveryUnblocked:    func() Payload { return new(DeliveryUnblocked) },
	KindDeliverySkipped:      func() Payload { return new(DeliverySkipped) },
	KindDeliveryLaneHeld:     func() Payload { return new(DeliveryLaneHeld) },
	KindReceiptIntermediate:  func() Payload { return new(ReceiptIntermediate) },
	KindDeliveryDue:          func() Payload { return new(DeliveryDue) },
	KindCallbackClaimed:      func() Payload { return new(CallbackClaimed) },
	KindCallbackAttempted:    func() Payload { return new(CallbackAttempted) },
	KindCallbackReleased:     func() Payload { return new(CallbackReleased) },
	KindCallbackLeaseExpired: func() Payload { return new(CallbackLeaseExpired) },
	KindRouteCreated:         func() Payload { return new(RouteCreated) },
	KindRouteUpdated:         func() Payload { return new(RouteUpdated) },
	KindRouteDeleted:         func() Payload { return new(RouteDeleted) },
	KindTargetCreated:        func() Payload { return new(TargetCreated) },
	KindTargetUpdated:        func() Payload { return new(TargetUpdated) },
	KindTargetDeleted:        func() Payload { return new(TargetDeleted) },
	KindTargetKeyAdded:       func() Payload { return new(TargetKeyAdded) },
	KindTargetKeyRotated:     func() Payload { return new(TargetKeyRotated) },
	KindSigningKeyAdded:      func() Payload { return new(SigningKeyAdded) },
	KindSigningKeyRotated:    func() Payload { return new(SigningKeyRotated) },
	KindSettingsChanged:      func() Payload { return new(SettingsChanged) },
	KindSourceCreated:        func() Payload { return new(SourceCreated) },
	KindSourceUpdated:        func() Payload { return new(SourceUpdated) },
	KindSourceDeleted:        func() Payload { return new(SourceDeleted) },
	KindSourceHolePassed:     func() Payload { return new(SourceHolePassed) },

	KindTargetDisabled: func() Payload { return new(TargetDisabled) },

	KindBreakerOpened:     func() Payload { return new(BreakerOpened) },
	KindBreakerHalfOpened: func() Payload { return new(BreakerHalfOpened) },
	KindBreakerClosed:     func() Payload { return new(BreakerClosed) },
	KindTargetThrottled:   func() Payload { return new(TargetThrottled) },

	KindMessagePayloadExpunged: func() Payload { return new(MessagePayloadExpunged) },
	KindRetentionArchived:      func() Payload { return new(RetentionArchived) },
	KindRetentionPass:          func() Payload { return new(RetentionPass) },

	KindOperationCreated:    func() Payload { return new(OperationCreated) },
	KindOperationMatched:    func() Payload { return new(OperationMatched) },
	KindOperationProgressed: func() Payload { return new(OperationProgressed) },
	KindOperationCancelled:  func() Payload { return new(OperationCancelled) },
	KindOperationFinished:   func() Payload { return new(OperationFinished) },
}

// Kinds returns every kind of the catalogue.
func Kinds() []Kind {
	out := make([]Kind, 0, len(catalogue))
	for k := range catalogue {
		out = append(out, k)
	}
	return out
}

// Delivery reports whether events of the kind belong to one delivery and
// carry its id, target and states.
func (k Kind) Delivery() bool { return strings.HasPrefix(string(k), "delivery.") }

// Operation reports whether events of the kind belong to a bulk
// operation's stream (OperationStream).
func (k Kind) Operation() bool { return strings.HasPrefix(string(k), "operation.") }

// Stream is the stream the kind belongs to: RetentionStream for the
// retention kinds, ConfigStream for the configuration kinds, and "" for
// message, operation and health kinds, whose stream is their message's,
// their operation's or their target's.
func (k Kind) Stream() string {
	switch {
	case strings.HasPrefix(string(k), "message.") || k.Delivery() || k.Operation() || k.Health():
		return ""
	case strings.HasPrefix(string(k), "retention."):
		return RetentionStream
	}
	return ConfigStream
}

// Payload is the typed body of an event.
type Payload interface {
	Kind() Kind
	// Validate checks the fields; Encode and Decode both call it.
	Validate() error
	// Text is the event in words, for history pages.
	Text() string
}

// Encode returns the payload as JSON after validating it. It leaves <, >
// and & as they are rather than escape them for HTML: the journal keeps
// the text as written, and the fast decoder reads no escapes.
func Encode(p Payload) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", p.Kind(), err)
	}
	data, err := plainjson.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", p.Kind(), err)
	}
	return data, nil
}

// ErrUnknownKind is returned for a kind outside the catalogue.
var ErrUnknownKind = errors.New("unknown event kind")

// Decode parses data as a payload of kind, refusing unknown kinds, unknown
// fields and payloads that do not validate. Message and delivery payloads
// in plain form take a fast path (fastjson.go); the rest, and whatever the
// fast path gives up on, go through encoding/json.
func Decode(kind Kind, data []byte) (Payload, error) {
	newPayload, ok := catalogue[kind]
	if !ok {
		return nil, fmt.Errorf("decode %q: %w", kind, ErrUnknownKind)
	}
	p := newPayload()
	fast, ok := p.(fastPayload)
	if !ok || !decodeFast(fast, data) {
		p = newPayload()
		if err := decodeJSON(p, data); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kind, err)
		}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err)
	}
	return p, nil
}

// decodeJSON decodes data into p with encoding/json, refusing unknown
// fields and anything after the payload.
func decodeJSON(p Payload, data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the payload")
	}
	return nil
}

func field(name, problem string) error { return &lifecycle.FieldError{Field: name, Problem: problem} }

func required(name string, present bool) error {
	if present {
		return nil
	}
	return field(name, "is required")
}

// MessageAccepted: a source stored a message. The payload bytes are in the
// payloads table; the event holds their size and SHA-256.
type MessageAccepted struct {
	Source         string `json:"source"`
	From           string `json:"from"`
	To             string `json:"to"`
	ContentType    string `json:"content_type"`
	PayloadSize    int64  `json:"payload_size"`
	PayloadSHA256  string `json:"payload_sha256"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// OrderingKey, when set, puts the message's deliveries to fifo targets
	// in the lane of that key at each.
	OrderingKey string `json:"ordering_key,omitempty"`
	// DuplicateKey is the sender's own identity of the message (a control
	// id); PossibleDuplicateOf, the latest earlier message of the source
	// with the same key, when there is one.
	DuplicateKey        string    `json:"duplicate_key,omitempty"`
	PossibleDuplicateOf uuid.UUID `json:"possible_duplicate_of,omitzero"`
	// CallbackURL, when set, is called with the message's outcome each
	// time it settles.
	CallbackURL string `json:"callback_url,omitempty"`
	// Type, when set, is what the message is, in the sender's words: the
	// event type a webhook names (invoice.created).
	Type string `json:"type,omitempty"`
	// DeliverAt, when set, is when the sender asked the deliveries to be
	// first due (deliver_at, or the ingest's time plus delay): the
	// dispatch schedules them for then.
	DeliverAt time.Time `json:"deliver_at,omitzero"`
	// Headers are the message's headers, names lower case
	// (lifecycle.CheckHeaders).
	Headers map[string]string `json:"headers,omitempty"`
	// TraceParent, TraceState and Baggage are the W3C trace context the
	// message belongs to (lifecycle.Trace), when it has one.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	Baggage     string `json:"baggage,omitempty"`
}

// Trace is the trace context the message belongs to.
func (p *MessageAccepted) Trace() lifecycle.Trace {
	return lifecycle.Trace{Parent: p.TraceParent, State: p.TraceState, Baggage: p.Baggage}
}

func (*MessageAccepted) Kind() Kind { return KindMessageAccepted }
func (p *MessageAccepted) Text() string {
	s := fmt.Sprintf("accepted from %s: %s to %s, %s of %s", p.Source, p.From, p.To, lifecycle.Count(p.PayloadSize, "byte", "bytes"), p.ContentType)
	if !p.DeliverAt.IsZero() {
		s += ", to be delivered at " + p.DeliverAt.UTC().Format(time.RFC3339)
	}
	return s
}
func (p *MessageAccepted) Validate() error { return p.validate(keyLength) }

// ValidateNew is Validate for a message being accepted now, with its
// idempotency and duplicate keys held to lifecycle.CheckKey: UTF-8 text
// without control characters, as the lookup of a repeat sends them to the
// database. Validate bounds only their length, so that the keys of the
// messages journaled before they were held to it still decode.
func (p *MessageAccepted) ValidateNew() error { return p.validate(lifecycle.CheckKey) }

// keyLength is Validate's check of a key.
func keyLength(name, key string) error {
	if len(key) > lifecycle.MaxPartyLength {
		return field(name, fmt.Sprintf("must be at most %d bytes", lifecycle.MaxPartyLength))
	}
	return nil
}

func (p *MessageAccepted) validate(checkKey func(field, key string) error) error {
	var size, sha error
	if p.PayloadSize < 0 {
		size = field("payload_size", "must not be negative")
	}
	if !isSHA256(p.PayloadSHA256) {
		sha = field("payload_sha256", "must be 64 hexadecimal digits")
	}
	dup := checkKey("duplicate_key", p.DuplicateKey)
	if dup == nil && p.PossibleDuplicateOf != uuid.Nil && p.DuplicateKey == "" {
		dup = field("possible_duplicate_of", "needs a duplicate_key")
	}
	return errors.Join(lifecycle.CheckName("source", p.Source), lifecycle.CheckParty("from", p.From),
		lifecycle.CheckParty("to", p.To), lifecycle.CheckParty("content_type", p.ContentType), size, sha,
		checkKey("idempotency_key", p.IdempotencyKey), lifecycle.CheckOrderingKey("ordering_key", p.OrderingKey), dup,
		checkCallbackURL(p.CallbackURL), lifecycle.CheckMessageType("type", p.Type), lifecycle.CheckHeaders("headers", p.Headers),
		p.Trace().Check(""))
}

// isSHA256 reports whether s is 64 hexadecimal digits of either case, as
// hex.DecodeString reads them, without decoding them.
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// NewDelivery is a delivery a dispatch creates: queued, or blocked behind
// the unsettled head of its lane.
type NewDelivery struct {
	ID uuid.UUID `json:"id"`
	// Seq numbers the message's deliveries from 1, in creation order.
	Seq    int    `json:"seq"`
	Target string `json:"target"`
	// Lane places the delivery in the lane of its target and its message's
	// ordering key; none when the target keeps no order or the message has
	// no key.
	Lane
	// Shape is what the target's transform made of the delivery where it
	// differs from the message; nil when the target has none or it
	// changed nothing.
	Shape *Shape `json:"shape,omitempty"`
}

// Shape is what a target's transform made of one delivery when it was
// made: what its attempts send instead of the message's, or why it is
// not sent. The shaped payload itself is kept beside the message's
// (projection's delivery_shapes), as the message's is, so that retention
// can expunge it; the journal holds its size and digest.
type Shape struct {
	// Cancel skips the delivery with this reason: it is made skipped.
	Cancel string `json:"cancel,omitempty"`
	// Error is why the transform failed: the delivery is made failed.
	Error string `json:"error,omitempty"`
	// Method and Path (appended to the target URL's path) and Headers
	// are sent instead of the target's method and beside its headers.
	Method  string            `json:"method,omitempty"`
	Path    string            `json:"path,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// ContentType, PayloadSize and PayloadSHA256 describe the payload
	// sent instead of the message's; empty when it is the message's.
	ContentType   string `json:"content_type,omitempty"`
	PayloadSize   int64  `json:"payload_size,omitempty"`
	PayloadSHA256 string `json:"payload_sha256,omitempty"`
}

// Settled reports whether the shape settles the delivery as it is made:
// cancelled or failed.
func (s *Shape) Settled() bool { return s != nil && (s.Cancel != "" || s.Error != "") }

// Shaped reports whether a payload other than the message's is sent.
func (s *Shape) Shaped() bool { return s != nil && s.PayloadSHA256 != "" }

func (s *Shape) validate(prefix string) error {
	switch {
	case s == nil:
		return nil
	case s.Cancel != "" && s.Error != "":
		return field(prefix+"cancel", "a delivery is cancelled or its transform failed, not both")
	case s.Settled() && (s.Method != "" || s.Path != "" || len(s.Headers) > 0 || s.ContentType != "" || s.PayloadSHA256 != ""):
		return field(prefix+"cancel", "a delivery that is not sent has nothing to send")
	case s.PayloadSHA256 != "" && !isSHA256(s.PayloadSHA256):
		return field(prefix+"payload_sha256", "must be 64 hexadecimal digits")
	case s.PayloadSize < 0 || (s.PayloadSize > 0 && s.PayloadSHA256 == ""):
		return field(prefix+"payload_size", "needs a payload_sha256 and must not be negative")
	}
	return nil
}

// shapesText is what the transforms did to a dispatch's deliveries, in
// words.
func (p NewDeliveries) shapesText() string {
	var parts []string
	for _, d := range p.Deliveries {
		switch {
		case d.Shape == nil:
		case d.Shape.Cancel != "":
			parts = append(parts, "cancelled by target "+d.Target+"'s transform: "+d.Shape.Cancel)
		case d.Shape.Error != "":
			parts = append(parts, "target "+d.Target+"'s transform failed: "+d.Shape.Error)
		default:
			parts = append(parts, "shaped by target "+d.Target+"'s transform")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

// Lane is a delivery's place in its lane: LaneSeq orders the lane's
// deliveries (from 1; 0 is no lane), Blocked says the delivery waits
// behind the lane's head, and Continue that its target's on_failure was
// continue when it was placed, so its failure lets the next one go.
type Lane struct {
	LaneSeq  int64 `json:"lane_seq,omitempty"`
	Blocked  bool  `json:"blocked,omitempty"`
	Continue bool  `json:"continue,omitempty"`
}

func (l Lane) validate(prefix string) error {
	switch {
	case l.LaneSeq < 0:
		return field(prefix+"lane_seq", "must not be negative")
	case l.Blocked && l.LaneSeq == 0:
		return field(prefix+"blocked", "needs a lane_seq: only a delivery in a lane is blocked")
	case l.Continue && l.LaneSeq == 0:
		return field(prefix+"continue", "needs a lane_seq: only a delivery in a lane has a lane's policy")
	}
	return nil
}

// NewDeliveries is the part dispatch and redispatch share.
type NewDeliveries struct {
	Deliveries []NewDelivery `json:"deliveries"`
	// NextDue is when the sweep first wakes the new deliveries again, in case
	// the wake-up published after commit is lost; for scheduled ones, when
	// they are first due.
	NextDue time.Time `json:"next_due,omitzero"`
	// Scheduled makes the deliveries scheduled until NextDue (a message's
	// deliver_at): not woken nor claimed before delivery.due.
	Scheduled bool `json:"scheduled,omitempty"`
	Routing
}

// Routing is why a dispatch went where it did: the routes that matched,
// the filters that failed, the version of the config stream whose
// routes were matched (0 in the events of before it was recorded), and
// the bound the filters ran under.
type Routing struct {
	Routes        []MatchedRoute `json:"routes,omitempty"`
	FilterErrors  []FilterError  `json:"filter_errors,omitempty"`
	ConfigVersion int64          `json:"config_version,omitempty"`
	// CostLimit names the bound on the cost of the filters that ran
	// (routing.CostBound), so the audit matches the decision again under
	// it; empty when none ran, and in the decisions of before it was
	// recorded, which cel-go's own tracker bounded.
	CostLimit string `json:"cost_limit,omitempty"`
}

// MatchedRoute is a route that matched a message, with what it matched on.
type MatchedRoute struct {
	ID     uuid.UUID `json:"id"`
	Target string    `json:"target"`
	Types  []string  `json:"types,omitempty"`
	Filter string    `json:"filter,omitempty"`
}

// FilterError is a route whose filter failed on a message, which it
// therefore did not match.
type FilterError struct {
	Route uuid.UUID `json:"route"`
	Error string    `json:"error"`
}

// routingText is the routes and failed filters of a dispatch in words.
func (r Routing) routingText() string {
	var parts []string
	for _, m := range r.Routes {
		s := "to " + m.Target + " by route " + m.ID.String()
		var why []string
		if len(m.Types) > 0 {
			why = append(why, "types "+strings.Join(m.Types, ", "))
		}
		if m.Filter != "" {
			why = append(why, "filter "+m.Filter)
		}
		if len(why) > 0 {
			s += " (" + strings.Join(why, "; ") + ")"
		}
		parts = append(parts, s)
	}
	for _, e := range r.FilterErrors {
		parts = append(parts, "the filter of route "+e.Route.String()+" failed: "+e.Error)
	}
	return strings.Join(parts, "; ")
}

func (p NewDeliveries) validate() error {
	if p.valid() {
		return nil
	}
	return p.problems()
}

// problems lists every problem of the deliveries.
func (p NewDeliveries) problems() error {
	var errs []error
	seqs := map[int]bool{}
	targets := map[string]bool{}
	for i, d := range p.Deliveries {
		name := fmt.Sprintf("deliveries[%d]", i)
		errs = append(errs, required(name+".id", d.ID != uuid.Nil), lifecycle.CheckName(name+".target", d.Target))
		if d.Seq < 1 || seqs[d.Seq] {
			errs = append(errs, field(name+".seq", "must be 1 or more and unique"))
		}
		if targets[d.Target] {
			errs = append(errs, field(name+".target", "must be unique in the message"))
		}
		errs = append(errs, d.Lane.validate(name+"."), d.Shape.validate(name+".shape."))
		if d.Shape.Settled() && d.LaneSeq > 0 {
			errs = append(errs, field(name+".lane_seq", "a delivery that is not sent takes no place in a lane"))
		}
		seqs[d.Seq], targets[d.Target] = true, true
	}
	if len(p.Deliveries) > 0 {
		errs = append(errs, required("next_due", !p.NextDue.IsZero()))
	}
	for i, r := range p.Routes {
		name := fmt.Sprintf("routes[%d]", i)
		errs = append(errs, required(name+".id", r.ID != uuid.Nil), lifecycle.CheckName(name+".target", r.Target))
	}
	for i, e := range p.FilterErrors {
		errs = append(errs, required(fmt.Sprintf("filter_errors[%d].route", i), e.Route != uuid.Nil))
	}
	if p.ConfigVersion < 0 {
		errs = append(errs, field("config_version", "must not be negative"))
	}
	return errors.Join(errs...)
}

// valid is problems finding nothing, without building the messages it
// would give: the journal's decoding asks it of every dispatch.
func (p NewDeliveries) valid() bool {
	for i, d := range p.Deliveries {
		if d.ID == uuid.Nil || d.Seq < 1 || lifecycle.CheckName("", d.Target) != nil || d.Lane.validate("") != nil ||
			d.Shape.validate("") != nil || d.Shape.Settled() && d.LaneSeq > 0 {
			return false
		}
		for _, e := range p.Deliveries[:i] {
			if e.Seq == d.Seq || e.Target == d.Target {
				return false
			}
		}
	}
	for _, r := range p.Routes {
		if r.ID == uuid.Nil || lifecycle.CheckName("", r.Target) != nil {
			return false
		}
	}
	for _, e := range p.FilterErrors {
		if e.Route == uuid.Nil {
			return false
		}
	}
	return p.ConfigVersion >= 0 && (len(p.Deliveries) == 0 || !p.NextDue.IsZero())
}

// schedule says when scheduled deliveries are due, for a Text.
func (p NewDeliveries) schedule() string {
	if !p.Scheduled {
		return ""
	}
	return ", scheduled for " + p.NextDue.UTC().Format(time.RFC3339)
}

func (p NewDeliveries) targets() string {
	names := make([]string, len(p.Deliveries))
	for i, d := range p.Deliveries {
		names[i] = d.Target
	}
	return strings.Join(names, ", ")
}

// MessageDispatched: the routes were matched once and one queued delivery
// was created per distinct target, or none when nothing matched.
type MessageDispatched struct{ NewDeliveries }

func (*MessageDispatched) Kind() Kind        { return KindMessageDispatched }
func (p *MessageDispatched) Validate() error { return p.validate() }
func (p *MessageDispatched) Text() string {
	text := "dispatched to " + p.targets() + p.schedule() + p.shapesText()
	if len(p.Deliveries) == 0 {
		text = "no route matched"
	}
	if why := p.routingText(); why != "" {
		text += "; routed " + why
	}
	return text
}

// MessageRedispatched: an operator matched the current routes again and a
// delivery was added for each matched target that had none.
type MessageRedispatched struct {
	NewDeliveries
	// Operation is the bulk operation that did it, if one did.
	Operation uuid.UUID `json:"operation,omitzero"`
}

func (*MessageRedispatched) Kind() Kind        { return KindMessageRedispatched }
func (p *MessageRedispatched) Validate() error { return p.validate() }
func (p *MessageRedispatched) Text() string {
	text := "redispatched: added " + p.targets() + p.schedule() + p.shapesText()
	if len(p.Deliveries) == 0 {
		text = "redispatched: every matched target already had a delivery"
	}
	if why := p.routingText(); why != "" {
		text += "; routed " + why
	}
	return text
}

// MessageResent: an operator sent a dispatched message again, as a new
// generation: deliveries to the targets of the current one (a resend), or
// to those the routes match now (a replay). The deliveries of the current
// generation that failed or stalled are superseded.
type MessageResent struct {
	// Generation is the new generation, the current one plus one.
	Generation int  `json:"generation"`
	Replay     bool `json:"replay,omitempty"`
	// Superseded lists the current generation's deliveries that failed or
	// stalled.
	Superseded []uuid.UUID `json:"superseded"`
	NewDeliveries
	Reason string `json:"reason,omitempty"`
	// Operation is the bulk operation that did it, if one did.
	Operation uuid.UUID `json:"operation,omitzero"`
}

func (*MessageResent) Kind() Kind { return KindMessageResent }
func (p *MessageResent) Validate() error {
	var errs []error
	if p.Generation < 2 {
		errs = append(errs, field("generation", fmt.Sprintf("must be 2 or more, got %d", p.Generation)))
	}
	for i, id := range p.Superseded {
		errs = append(errs, required(fmt.Sprintf("superseded[%d]", i), id != uuid.Nil))
	}
	return errors.Join(append(errs, p.validate())...)
}
func (p *MessageResent) Text() string {
	verb := "resent"
	if p.Replay {
		verb = "replayed"
	}
	s := fmt.Sprintf("%s as generation %d", verb, p.Generation)
	if len(p.Deliveries) == 0 {
		s += ": no route matched"
	} else {
		s += " to " + p.targets() + p.shapesText()
	}
	if n := len(p.Superseded); n > 0 {
		s += fmt.Sprintf("; %d superseded", n)
	}
	return withDetail(s, p.Reason)
}

// MessageRefused: an accepted message was settled without deliveries.
type MessageRefused struct {
	Refusal lifecycle.Refusal `json:"refusal"`
	Reason  string            `json:"reason"`
}

func (*MessageRefused) Kind() Kind { return KindMessageRefused }
func (p *MessageRefused) Text() string {
	return "refused (" + p.Refusal.Label() + "): " + p.Reason
}
func (p *MessageRefused) Validate() error {
	var errs []error
	if _, err := lifecycle.ParseRefusal(string(p.Refusal)); err != nil {
		errs = append(errs, field("refusal", err.Error()))
	}
	return errors.Join(append(errs, required("reason", p.Reason != ""))...)
}

// DeliveryWoken: a wake-up was published for an unclaimed delivery.
type DeliveryWoken struct {
	// DispatchCount is the number of unclaimed wake-ups, this one included.
	DispatchCount int       `json:"dispatch_count"`
	NextDue       time.Time `json:"next_due"`
}

func (*DeliveryWoken) Kind() Kind { return KindDeliveryWoken }
func (p *DeliveryWoken) Text() string {
	return fmt.Sprintf("wake-up %d; next at %s", p.DispatchCount, stamp(p.NextDue))
}
func (p *DeliveryWoken) Validate() error {
	return errors.Join(positive("dispatch_count", p.DispatchCount), required("next_due", !p.NextDue.IsZero()))
}

// DeliveryClaimed: a worker took the delivery for one attempt, under a lease.
type DeliveryClaimed struct {
	Token    uuid.UUID `json:"token"`
	Attempt  int       `json:"attempt"`
	LeaseEnd time.Time `json:"lease_end"`
}

func (*DeliveryClaimed) Kind() Kind { return KindDeliveryClaimed }
func (p *DeliveryClaimed) Text() string {
	return fmt.Sprintf("attempt %d claimed; lease until %s", p.Attempt, stamp(p.LeaseEnd))
}
func (p *DeliveryClaimed) Validate() error {
	return errors.Join(required("token", p.Token != uuid.Nil), positive("attempt", p.Attempt),
		required("lease_end", !p.LeaseEnd.IsZero()))
}

// DeliveryAttempted: the claimed attempt ended with an outcome.
type DeliveryAttempted struct {
	Token   uuid.UUID         `json:"token"`
	Attempt int               `json:"attempt"`
	Outcome lifecycle.Outcome `json:"outcome"`
}

func (*DeliveryAttempted) Kind() Kind { return KindDeliveryAttempted }
func (p *DeliveryAttempted) Text() string {
	o := p.Outcome
	s := fmt.Sprintf("attempt %d: %s", p.Attempt, o.Kind)
	switch o.Kind {
	case lifecycle.OutcomeRetry:
		s += " at " + stamp(o.RetryAt)
	case lifecycle.OutcomeAwaitingAck:
		s += " until " + stamp(o.Deadline)
	}
	if o.ExternalID != "" {
		s += ", the receiver's id " + o.ExternalID
	}
	if o.Text != "" {
		s += ": " + o.Text
	}
	return s
}
func (p *DeliveryAttempted) Validate() error {
	return errors.Join(required("token", p.Token != uuid.Nil), positive("attempt", p.Attempt), p.Outcome.Validate())
}

// DeliveryReleased: a stopping worker gave its claim back.
type DeliveryReleased struct {
	Token uuid.UUID `json:"token"`
	// Started says the attempt had begun its I/O, so the target may have the
	// payload already: the delivery retries rather than queueing.
	Started bool   `json:"started"`
	Reason  string `json:"reason"`
}

func (*DeliveryReleased) Kind() Kind { return KindDeliveryReleased }
func (p *DeliveryReleased) Text() string {
	if p.Started {
		return "released after its I/O started: " + p.Reason
	}
	return "released before any I/O: " + p.Reason
}
func (p *DeliveryReleased) Validate() error {
	return errors.Join(required("token", p.Token != uuid.Nil), required("reason", p.Reason != ""))
}

// DeliveryLeaseExpired: a claim's lease ran out before its outcome was
// recorded; the worker is presumed dead.
type DeliveryLeaseExpired struct {
	Token    uuid.UUID `json:"token"`
	LeaseEnd time.Time `json:"lease_end"`
}

func (*DeliveryLeaseExpired) Kind() Kind { return KindDeliveryLeaseExpired }
func (p *DeliveryLeaseExpired) Text() string {
	return "attempt interrupted: lease expired at " + stamp(p.LeaseEnd)
}
func (p *DeliveryLeaseExpired) Validate() error {
	return errors.Join(required("token", p.Token != uuid.Nil), required("lease_end", !p.LeaseEnd.IsZero()))
}

// DeliveryStalled: the delivery used up its wake-ups without being claimed.
type DeliveryStalled struct {
	WakeUps int    `json:"wake_ups"`
	Reason  string `json:"reason"`
}

func (*DeliveryStalled) Kind() Kind     { return KindDeliveryStalled }
func (p *DeliveryStalled) Text() string { return "stalled: " + p.Reason }
func (p *DeliveryStalled) Validate() error {
	return errors.Join(positive("wake_ups", p.WakeUps), required("reason", p.Reason != ""))
}

// Receipt is what a receiver's receipt says beyond positive or negative:
// its detail and, for a receipt that named the delivery by the receiver's
// own id (POST /receipts), that id and the receiver's exact status and
// code.
type Receipt struct {
	Detail     string `json:"detail,omitempty"`
	ExternalID string `json:"external_id,omitempty"`
	Status     string `json:"status,omitempty"`
	Code       string `json:"code,omitempty"`
}

// text is the receipt's particulars in words, after what.
func (r Receipt) text(what string) string {
	var parts []string
	if r.ExternalID != "" {
		parts = append(parts, "id "+r.ExternalID)
	}
	if r.Status != "" {
		parts = append(parts, "status "+r.Status)
	}
	if r.Code != "" {
		parts = append(parts, "code "+r.Code)
	}
	if len(parts) > 0 {
		what += " (" + strings.Join(parts, ", ") + ")"
	}
	return withDetail(what, r.Detail)
}

func (r Receipt) validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{{"external_id", r.ExternalID}, {"status", r.Status}, {"code", r.Code}} {
		if f.v != "" {
			errs = append(errs, lifecycle.CheckExternalID(f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// ReceiptReceived: the receipt an awaiting delivery owed arrived. A receipt
// by the receiver's id consumed that id's correlation.
type ReceiptReceived struct {
	Positive bool `json:"positive"`
	Receipt
}

func (*ReceiptReceived) Kind() Kind { return KindReceiptReceived }
func (p *ReceiptReceived) Text() string {
	return p.Receipt.text(receiptWord(p.Positive) + " receipt")
}
func (p *ReceiptReceived) Validate() error { return p.Receipt.validate() }

// ReceiptRefused: a receipt arrived for a delivery that was not awaiting one,
// or a negative one by a receiver's id that an earlier hand-over of the
// delivery gave (SupersededBy). It changes nothing but is kept, so the
// history shows it; a final receipt by the receiver's id consumed that
// id's correlation all the same.
type ReceiptRefused struct {
	Positive bool `json:"positive"`
	Receipt
	Reason string `json:"reason"`
	// SupersededBy, for a negative receipt by a receiver's id, is the
	// version of the message's stream whose delivery.attempted handed the
	// delivery over again, under another id or none, after the hand-over
	// that gave this one: the later hand-over may yet succeed, so the
	// receipt is refused while the delivery awaits it. 0 for any other
	// refusal.
	SupersededBy int `json:"superseded_by,omitempty"`
}

func (*ReceiptRefused) Kind() Kind { return KindReceiptRefused }
func (p *ReceiptRefused) Text() string {
	return p.Receipt.text(receiptWord(p.Positive) + " receipt refused: " + p.Reason)
}
func (p *ReceiptRefused) Validate() error {
	var superseded error
	switch {
	case p.SupersededBy < 0:
		superseded = field("superseded_by", fmt.Sprintf("must be 0 or more, got %d", p.SupersededBy))
	case p.SupersededBy > 0 && (p.Positive || p.ExternalID == ""):
		superseded = field("superseded_by", "is only for a negative receipt by a receiver's id")
	}
	return errors.Join(required("reason", p.Reason != ""), superseded, p.Receipt.validate())
}

// ReceiptIntermediate: a receiver's receipt by its own id that is not
// final ("accepted", "en route"). It settles nothing and consumes no
// correlation; the history shows it.
type ReceiptIntermediate struct {
	Receipt
}

func (*ReceiptIntermediate) Kind() Kind     { return KindReceiptIntermediate }
func (p *ReceiptIntermediate) Text() string { return p.Receipt.text("intermediate receipt") }
func (p *ReceiptIntermediate) Validate() error {
	return errors.Join(required("external_id", p.ExternalID != ""), p.Receipt.validate())
}

// ReceiptTimedOut: the receipt deadline passed; the delivery failed.
type ReceiptTimedOut struct {
	Deadline time.Time `json:"deadline"`
	Reason   string    `json:"reason"`
}

func (*ReceiptTimedOut) Kind() Kind     { return KindReceiptTimedOut }
func (p *ReceiptTimedOut) Text() string { return p.Reason }
func (p *ReceiptTimedOut) Validate() error {
	return errors.Join(required("deadline", !p.Deadline.IsZero()), required("reason", p.Reason != ""))
}

// DeliveryRedelivered: an operator queued the delivery again. A delivery
// that had settled for its lane joins the back of the lane: Lane is its new
// place there (blocked when the lane has a head); a lane's head keeps its
// place and Lane is empty.
type DeliveryRedelivered struct {
	DispatchCount int       `json:"dispatch_count"`
	NextDue       time.Time `json:"next_due"`
	Lane
	// Operation is the bulk operation that did it, if one did.
	Operation uuid.UUID `json:"operation,omitzero"`
}

func (*DeliveryRedelivered) Kind() Kind { return KindDeliveryRedelivered }
func (p *DeliveryRedelivered) Text() string {
	switch {
	case p.Blocked:
		return "queued again by an operator, at the back of its lane"
	case p.LaneSeq > 0:
		return "queued again by an operator, at the head of its lane"
	}
	return "queued again by an operator"
}
func (p *DeliveryRedelivered) Validate() error {
	return errors.Join(positive("dispatch_count", p.DispatchCount), required("next_due", !p.NextDue.IsZero()),
		p.Lane.validate(""))
}

// DeliveryUnblocked: the delivery ahead of a blocked delivery in its lane
// settled for the lane (or its target stopped keeping order), so it is
// queued and woken.
type DeliveryUnblocked struct {
	DispatchCount int       `json:"dispatch_count"`
	NextDue       time.Time `json:"next_due"`
	// After is the delivery whose settling let this one go; none when the
	// target stopped keeping order.
	After uuid.UUID `json:"after,omitzero"`
}

func (*DeliveryUnblocked) Kind() Kind { return KindDeliveryUnblocked }
func (p *DeliveryUnblocked) Text() string {
	if p.After == uuid.Nil {
		return "unblocked: its target keeps no order any more"
	}
	return "unblocked: the delivery ahead of it in its lane settled (" + p.After.String() + ")"
}
func (p *DeliveryUnblocked) Validate() error {
	return errors.Join(positive("dispatch_count", p.DispatchCount), required("next_due", !p.NextDue.IsZero()))
}

// DeliveryDue: a scheduled delivery came due (the sweep), or an operator
// delivered its message now, ahead of its time (Early): it is queued and
// woken.
type DeliveryDue struct {
	DispatchCount int       `json:"dispatch_count"`
	NextDue       time.Time `json:"next_due"`
	Early         bool      `json:"early,omitempty"`
}

func (*DeliveryDue) Kind() Kind { return KindDeliveryDue }
func (p *DeliveryDue) Text() string {
	if p.Early {
		return "delivered now by an operator, ahead of its schedule"
	}
	return "came due on its schedule"
}
func (p *DeliveryDue) Validate() error {
	return errors.Join(positive("dispatch_count", p.DispatchCount), required("next_due", !p.NextDue.IsZero()))
}

// DeliverySkipped: an operator settled the delivery without sending it.
type DeliverySkipped struct {
	Reason string `json:"reason,omitempty"`
	// Operation is the bulk operation that did it, if one did.
	Operation uuid.UUID `json:"operation,omitzero"`
}

func (*DeliverySkipped) Kind() Kind        { return KindDeliverySkipped }
func (p *DeliverySkipped) Text() string    { return withDetail("skipped by an operator", p.Reason) }
func (p *DeliverySkipped) Validate() error { return nil }

// DeliveryLaneHeld: the head of a lane had kept deliveries waiting behind
// it for longer than its target's head_alert_after. It changes nothing; it
// is recorded once per head and raises the alert lane_blocked.
type DeliveryLaneHeld struct {
	Waiting int64 `json:"waiting"`
	// Since is when the first of them began to wait behind this head.
	Since time.Time `json:"since"`
}

func (*DeliveryLaneHeld) Kind() Kind { return KindDeliveryLaneHeld }
func (p *DeliveryLaneHeld) Text() string {
	return fmt.Sprintf("holding its lane: %d waiting since %s", p.Waiting, stamp(p.Since))
}
func (p *DeliveryLaneHeld) Validate() error {
	var n error
	if p.Waiting < 1 {
		n = field("waiting", fmt.Sprintf("must be 1 or more, got %d", p.Waiting))
	}
	return errors.Join(n, required("since", !p.Since.IsZero()))
}

// RouteCreated: a route was added.
type RouteCreated struct {
	Route lifecycle.Route `json:"route"`
}

func (*RouteCreated) Kind() Kind        { return KindRouteCreated }
func (p *RouteCreated) Text() string    { return "route created: " + routeText(p.Route) }
func (p *RouteCreated) Validate() error { return validateRoute(p.Route) }

// RouteUpdated: a route was changed; Route is the whole new route.
type RouteUpdated struct {
	Route lifecycle.Route `json:"route"`
}

func (*RouteUpdated) Kind() Kind        { return KindRouteUpdated }
func (p *RouteUpdated) Text() string    { return "route updated: " + routeText(p.Route) }
func (p *RouteUpdated) Validate() error { return validateRoute(p.Route) }

// RouteDeleted: a route was removed.
type RouteDeleted struct {
	ID uuid.UUID `json:"id"`
}

func (*RouteDeleted) Kind() Kind        { return KindRouteDeleted }
func (p *RouteDeleted) Text() string    { return "route deleted: " + p.ID.String() }
func (p *RouteDeleted) Validate() error { return required("id", p.ID != uuid.Nil) }

// TargetCreated: a target was added.
type TargetCreated struct {
	Target lifecycle.Target `json:"target"`
	// ClusterLimits says Target's max_concurrent bounds the attempts
	// across every process. A definition journaled before it did leaves
	// it out: its max_concurrent bounded each process's, and the audit
	// holds no claim to it.
	ClusterLimits bool `json:"cluster_limits,omitempty"`
}

func (*TargetCreated) Kind() Kind        { return KindTargetCreated }
func (p *TargetCreated) Text() string    { return "target created: " + p.Target.Name }
func (p *TargetCreated) Validate() error { return errors.Join(p.Target.Validate(), noKey(p.Target)) }

// noKey refuses a definition that holds a signing key: the journal records
// a key's id and fingerprint only (TargetKeyAdded).
func noKey(t lifecycle.Target) error {
	if t.Signing != nil && t.Signing.Key != "" {
		return field("target.signing.key", "a key is never journaled")
	}
	return nil
}

// TargetUpdated: a target was changed; Target is the whole new definition.
type TargetUpdated struct {
	Target lifecycle.Target `json:"target"`
	// ClusterLimits is TargetCreated's.
	ClusterLimits bool `json:"cluster_limits,omitempty"`
}

func (*TargetUpdated) Kind() Kind        { return KindTargetUpdated }
func (p *TargetUpdated) Text() string    { return "target updated: " + p.Target.Name }
func (p *TargetUpdated) Validate() error { return errors.Join(p.Target.Validate(), noKey(p.Target)) }

// TargetDeleted: a target was removed.
type TargetDeleted struct {
	Name string `json:"name"`
}

func (*TargetDeleted) Kind() Kind        { return KindTargetDeleted }
func (p *TargetDeleted) Text() string    { return "target deleted: " + p.Name }
func (p *TargetDeleted) Validate() error { return lifecycle.CheckName("name", p.Name) }

// TargetKeyAdded: a target got a signing key, stored sealed beside it
// (target_keys). The event names the key by its id and fingerprint,
// never by its material.
type TargetKeyAdded struct {
	Target      string `json:"target"`
	KeyID       string `json:"key_id"`
	Scheme      string `json:"scheme"`
	Fingerprint string `json:"fingerprint"`
}

func (*TargetKeyAdded) Kind() Kind { return KindTargetKeyAdded }
func (p *TargetKeyAdded) Text() string {
	return fmt.Sprintf("target %s: %s signing key %s added (%s)", p.Target, p.Scheme, p.KeyID, p.Fingerprint)
}
func (p *TargetKeyAdded) Validate() error {
	return errors.Join(lifecycle.CheckName("target", p.Target), required("key_id", p.KeyID != ""),
		required("scheme", p.Scheme != ""), required("fingerprint", p.Fingerprint != ""))
}

// The reasons a target is disabled by what its receiver answered: a 410
// Gone, or failures alone for its health's disable_after.
const (
	DisabledGone    = "gone"
	DisabledFailing = "failing"
)

// TargetDisabled: the target was disabled by what its receiver answered,
// not by an operator, and its definition's enabled is false from then on;
// an operator's target.updated enables it again. With Reason DisabledGone,
// the attempt of DeliveryID (of MessageID) was answered StatusCode 410;
// with DisabledFailing, every attempt failed from FailingSince on, the
// attempt of DeliveryID the last.
type TargetDisabled struct {
	Target       string    `json:"target"`
	Reason       string    `json:"reason"`
	MessageID    uuid.UUID `json:"message_id"`
	DeliveryID   uuid.UUID `json:"delivery_id"`
	StatusCode   int       `json:"status_code,omitzero"`
	FailingSince time.Time `json:"failing_since,omitzero"`
}

func (*TargetDisabled) Kind() Kind { return KindTargetDisabled }
func (p *TargetDisabled) Text() string {
	if p.Reason == DisabledFailing {
		return fmt.Sprintf("target %s disabled (%s): every attempt failed since %s, the last of delivery %s", p.Target, p.Reason,
			stamp(p.FailingSince), p.DeliveryID)
	}
	return fmt.Sprintf("target %s disabled (%s): its receiver answered %d to delivery %s", p.Target, p.Reason, p.StatusCode, p.DeliveryID)
}
func (p *TargetDisabled) Validate() error {
	var reason, status error
	switch p.Reason {
	case DisabledGone:
		if p.StatusCode != 410 {
			status = field("status_code", fmt.Sprintf("must be 410 for reason %q, got %d", DisabledGone, p.StatusCode))
		}
	case DisabledFailing:
		if p.StatusCode != 0 || p.FailingSince.IsZero() {
			status = field("failing_since", fmt.Sprintf("is required, and status_code allowed for none, for reason %q", DisabledFailing))
		}
	default:
		reason = field("reason", fmt.Sprintf("%q: allowed are %q and %q", p.Reason, DisabledGone, DisabledFailing))
	}
	return errors.Join(lifecycle.CheckName("target", p.Target), reason, required("message_id", p.MessageID != uuid.Nil),
		required("delivery_id", p.DeliveryID != uuid.Nil), status)
}

// SettingsChanged: the settings were replaced; Settings is the whole new set.
type SettingsChanged struct {
	Settings lifecycle.Settings `json:"settings"`
}

func (*SettingsChanged) Kind() Kind { return KindSettingsChanged }
func (p *SettingsChanged) Text() string {
	s := p.Settings.WithDefaults()
	text := fmt.Sprintf("settings changed: max_dispatches %d, callback_max_attempts %d, operations rate %d/s; retention: %s; "+
		"live histories: %d a process, %d a session; signing: callbacks %s, alerts %s",
		s.Delivery.MaxDispatches, s.CallbackMaxAttempts, s.Operations.Rate, p.Settings.Retention,
		s.Console.MaxStreams, s.Console.MaxStreamsPerSession, s.Callbacks.Signing.Scheme, s.Alerts.Signing.Scheme)
	if c := s.Callbacks; len(c.AllowedNetworks) > 0 || len(c.AllowedHosts) > 0 {
		text += fmt.Sprintf("; callbacks: allowed networks [%s], allowed hosts [%s]",
			strings.Join(c.AllowedNetworks, ", "), strings.Join(c.AllowedHosts, ", "))
	}
	return text
}
func (p *SettingsChanged) Validate() error { return p.Settings.Validate() }

func validateRoute(r lifecycle.Route) error {
	return errors.Join(required("route.id", r.ID != uuid.Nil), r.Validate())
}

func routeText(r lifecycle.Route) string {
	s := fmt.Sprintf("%s: %s to %s -> %s", r.Source, r.From, r.To, r.Target)
	if len(r.Types) > 0 {
		s += ", types " + strings.Join(r.Types, ", ")
	}
	if r.Filter != "" {
		s += ", filter " + r.Filter
	}
	return s
}

func positive(name string, n int) error {
	if n < 1 {
		return field(name, fmt.Sprintf("must be 1 or more, got %d", n))
	}
	return nil
}

func receiptWord(positive bool) string {
	if positive {
		return "positive"
	}
	return "negative"
}

func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + ": " + detail
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
