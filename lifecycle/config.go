package lifecycle

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// AnyParty is the route pattern that covers every party name.
const AnyParty = "*"

// Route sends the messages of one source whose parties its patterns cover to
// one target. Routes are matched once, when a message is dispatched.
type Route struct {
	ID     uuid.UUID `json:"id"`
	Source string    `json:"source"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Target string    `json:"target"`
	// Types, when set, are the message types the route takes (CoversType);
	// none takes every message.
	Types []string `json:"types,omitempty"`
	// Filter, when set, is a CEL expression over the message that must
	// yield true for the route to match (package routing).
	Filter string `json:"filter,omitempty"`
}

// Covers reports whether the route applies to a message of source from one
// party to another: the source is the route's, and each pattern is AnyParty
// or exactly the party's name.
func (r Route) Covers(source, from, to string) bool {
	return r.Source == source && patternCovers(r.From, from) && patternCovers(r.To, to)
}

func patternCovers(pattern, name string) bool {
	return pattern == AnyParty || pattern == name
}

// CoversType reports whether the route's types take a message of type t:
// no types, or one that is AnyParty, t exactly, or a prefix pattern such
// as "invoice.*" that t starts with ("invoice.created"). A message without
// a type is taken only by a route without types or with AnyParty.
func (r Route) CoversType(t string) bool {
	if len(r.Types) == 0 {
		return true
	}
	for _, p := range r.Types {
		if p == AnyParty || p == t && t != "" {
			return true
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok && t != "" && strings.HasPrefix(t, prefix) {
			return true
		}
	}
	return false
}

// Route limits: the types a route lists and the length of its filter.
const (
	MaxRouteTypes   = 32
	MaxFilterLength = 2048
)

// Validate checks every field and returns all problems joined. The filter
// is checked here only for its length; package routing compiles it.
func (r Route) Validate() error {
	var filter error
	if len(r.Filter) > MaxFilterLength {
		filter = &FieldError{Field: "filter", Problem: fmt.Sprintf("must be at most %d bytes, got %d", MaxFilterLength, len(r.Filter))}
	}
	return errors.Join(
		CheckName("source", r.Source),
		checkPattern("from", r.From),
		checkPattern("to", r.To),
		CheckName("target", r.Target),
		checkTypePatterns(r.Types),
		filter,
	)
}

// checkPattern checks a route's party pattern as CheckParty checks a
// party, saying, when it is missing, how a route takes any party.
func checkPattern(field, pattern string) error {
	if pattern == "" {
		return &FieldError{Field: field, Problem: fmt.Sprintf("is required: a party's name, or %q for any", AnyParty)}
	}
	return CheckParty(field, pattern)
}

// checkTypePatterns checks a route's types: AnyParty, a message type, or a
// message type's prefix followed by "*" (invoice.*), each once.
func checkTypePatterns(types []string) error {
	if len(types) > MaxRouteTypes {
		return &FieldError{Field: "types", Problem: fmt.Sprintf("must list at most %d patterns, got %d", MaxRouteTypes, len(types))}
	}
	var errs []error
	for i, p := range types {
		field := fmt.Sprintf("types[%d]", i)
		name := strings.TrimSuffix(p, "*")
		switch {
		case p == AnyParty:
		case name == "":
			errs = append(errs, &FieldError{Field: field, Problem: `must be "*", a message type such as invoice.created, or a prefix such as invoice.*`})
		case strings.Contains(name, "*"):
			errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf("%q may have a * only at its end", p)})
		default:
			errs = append(errs, CheckMessageType(field, name))
		}
		if slices.Contains(types[:i], p) {
			errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf("%q is listed twice", p)})
		}
	}
	return errors.Join(errs...)
}

// Target is a destination deliveries are made to. Its name identifies it
// everywhere (routes, deliveries, the wake-up subject), whatever its kind.
type Target struct {
	// Name identifies the target; a name as CheckName allows.
	Name string `json:"name"`
	// Kind is one of the kinds of the targets package, which checks Config.
	Kind string `json:"kind"`
	// Enabled false makes the target claim nothing: its deliveries are
	// held, neither woken nor stalled, until it is enabled again.
	Enabled bool `json:"enabled"`
	// Config is the kind's own configuration, a JSON object.
	Config json.RawMessage `json:"config"`
	// MaxConcurrent, when set (from 1 to 100), bounds the attempts in
	// flight across every process (InFlightRule), and so each process's
	// slots. Left out (0), there is no bound across the cluster and each
	// process runs the kind's default slots (targets.Slots).
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// Slots, when set (from 1 to 100, and no more than MaxConcurrent), is
	// how many attempts each process runs at once. It bounds nothing
	// across the cluster: a target without MaxConcurrent or Rate stays
	// unlimited, whatever its slots. Left out (0), MaxConcurrent or the
	// kind's default decides (targets.Slots).
	Slots int `json:"slots,omitempty"`
	// Rate, when set, bounds how often attempts start, across every
	// process.
	Rate *Rate `json:"rate,omitempty"`
	// AttemptTimeout bounds one attempt. Default 30 s; from 1 ms to 1 h.
	AttemptTimeout Duration `json:"attempt_timeout"`
	// Retry decides what follows an attempt that failed for now.
	Retry RetryPolicy `json:"retry"`
	// Receipt, when set, makes a handed-over delivery await its receipt
	// instead of counting as delivered.
	Receipt *ReceiptPolicy `json:"receipt,omitempty"`
	// Ordering keeps the order of the deliveries of one ordering key.
	// Default mode none.
	Ordering Ordering `json:"ordering,omitzero"`
	// Signing is how an http target signs its attempts; the targets
	// package fills its default and checks it.
	Signing *Signing `json:"signing,omitempty"`
	// Health is the breaker and the auto-disable; default DefaultHealth.
	Health *Health `json:"health,omitempty"`
	// Transform is a CEL expression over the message that shapes each
	// delivery as it is made (package routing, docs/routing.md).
	Transform string `json:"transform,omitempty"`
}

// Signing is how a target signs what it sends, by the Standard Webhooks
// specification.
type Signing struct {
	// Scheme is hmac-sha256, ed25519 or none.
	Scheme string `json:"scheme"`
	// Keys are the ids of the keys that sign, oldest first: set by
	// Waybill, whatever a request says, so that a definition changes with
	// its keys.
	Keys []string `json:"keys,omitempty"`
	// Key is a key given on creation to sign with instead of a new one.
	// It is kept sealed beside the target, never in its definition: a
	// definition stored or journaled has none.
	Key string `json:"key,omitempty"`
}

// ReceiptPolicy is how long a target's receipt may take, and how the
// receipt names its delivery.
type ReceiptPolicy struct {
	// Timeout is the time from the hand-over to the receipt deadline, after
	// which the delivery fails. Required; from 1 s to 720 h.
	Timeout Duration `json:"timeout"`
	// Correlate, when set, takes the receiver's own id for the message
	// from its answer, so that its receipts may name the delivery by that
	// id (POST /receipts) rather than by Waybill's.
	Correlate *Correlation `json:"correlate,omitempty"`
}

// Correlation says where in a receiver's answer its id for the message
// is: exactly one of a header and a JSON pointer into the body.
type Correlation struct {
	// Header is the name of a response header, such as X-Message-Id.
	Header string `json:"header,omitempty"`
	// JSON is a JSON pointer (RFC 6901), such as /id, into the body of a
	// 2xx answer; the value must be a string or a number.
	JSON string `json:"json,omitempty"`
}

// Validate checks that exactly one place is given and that it is well
// formed.
func (c Correlation) Validate() error {
	switch {
	case (c.Header == "") == (c.JSON == ""):
		return &FieldError{Field: "receipt.correlate", Problem: `give exactly one of header (a response header) and json (a JSON pointer such as "/id")`}
	case c.Header != "" && !isToken(c.Header):
		return &FieldError{Field: "receipt.correlate.header", Problem: fmt.Sprintf("%q is not a header name", c.Header)}
	case c.JSON != "" && (c.JSON[0] != '/' || !validPointer(c.JSON)):
		return &FieldError{Field: "receipt.correlate.json",
			Problem: fmt.Sprintf(`%q is not a JSON pointer: write it as "/id" or "/message/0/id" (~0 for ~, ~1 for /)`, c.JSON)}
	}
	return nil
}

// isToken reports an HTTP token (RFC 9110), as a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// validPointer reports whether every ~ of a JSON pointer escapes ~ or /.
func validPointer(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 == len(p) || p[i+1] != '0' && p[i+1] != '1') {
			return false
		}
	}
	return true
}

// MaxExternalIDLength bounds a receiver's id for a message.
const MaxExternalIDLength = 255

// CheckExternalID validates a receiver's id for a message: 1 to 255 bytes
// of UTF-8 text without control characters.
func CheckExternalID(field, id string) error { return CheckParty(field, id) }

// DefaultMaxPayload is the default bound of a message's payload and of a
// request's body (--max-payload), which a transform's payload keeps too:
// 10 MiB.
const DefaultMaxPayload = 10 << 20

// MaxReceiptTextLength bounds a receipt's text, the receiver's detail,
// which the journal keeps: room for any message a receiver means for
// people, and far below what the event stream can publish.
const MaxReceiptTextLength = 4096

// CheckReceiptText validates a receipt's text: at most
// MaxReceiptTextLength bytes, or none.
func CheckReceiptText(field, text string) error {
	if len(text) > MaxReceiptTextLength {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be at most %d bytes, got %d", MaxReceiptTextLength, len(text))}
	}
	return nil
}

// MaxErrorTextLength bounds the text of an error that may quote what a
// receiver answered or a sender sent (an HTTP client's error, a
// transform's or a filter's): it is Cut to this before the journal keeps
// it, since the quote may run to megabytes.
const MaxErrorTextLength = 1024

// The defaults and bounds of a Target.
const (
	DefaultAttemptTimeout = 30 * time.Second
	MaxAttemptTimeout     = time.Hour
	MaxMaxConcurrent      = 100
	MaxSlots              = 100
	MaxReceiptTimeout     = 720 * time.Hour
)

// ProcessSlots is how many attempts to t each process runs at once: its
// Slots when set, else its MaxConcurrent when set (which bounds the
// cluster too), else kindDefault, its kind's.
func (t Target) ProcessSlots(kindDefault int) int {
	return cmp.Or(t.Slots, t.MaxConcurrent, kindDefault)
}

// WithDefaults fills the fields left at zero but MaxConcurrent and Slots,
// whose defaults (no bound across the cluster, the kind's slots) are
// applied where slots are made.
func (t Target) WithDefaults() Target {
	if len(t.Config) == 0 {
		t.Config = json.RawMessage(`{}`)
	}
	if t.AttemptTimeout == 0 {
		t.AttemptTimeout = Duration(DefaultAttemptTimeout)
	}
	t.Retry = t.Retry.WithDefaults()
	t.Ordering = t.Ordering.WithDefaults()
	if t.Health == nil {
		t.Health = DefaultHealth()
	}
	if t.Rate != nil {
		r := t.Rate.WithDefaults()
		t.Rate = &r
	}
	return t
}

// Lease is how long a claim holds a delivery: twice the attempt timeout and
// a minute, so a slow attempt and its recording finish inside it.
func (t Target) Lease() time.Duration { return 2*t.AttemptTimeout.D() + time.Minute }

// Validate checks every field and returns all problems joined. The kind's
// own configuration is the kind's to check.
func (t Target) Validate() error {
	var errs []error
	errs = append(errs, CheckName("name", t.Name), CheckName("kind", t.Kind), checkConfig(t.Config))
	if t.MaxConcurrent < 0 || t.MaxConcurrent > MaxMaxConcurrent {
		errs = append(errs, &FieldError{Field: "max_concurrent",
			Problem: fmt.Sprintf("must be from 1 to %d, or left out for no bound across the cluster, got %d", MaxMaxConcurrent, t.MaxConcurrent)})
	}
	switch {
	case t.Slots < 0 || t.Slots > MaxSlots:
		errs = append(errs, &FieldError{Field: "slots",
			Problem: fmt.Sprintf("must be from 1 to %d, or left out for max_concurrent, else the kind's default, in each process, got %d", MaxSlots, t.Slots)})
	case t.MaxConcurrent > 0 && t.Slots > t.MaxConcurrent:
		errs = append(errs, &FieldError{Field: "slots",
			Problem: fmt.Sprintf("must be at most max_concurrent (%d), which bounds every process, got %d", t.MaxConcurrent, t.Slots)})
	}
	if t.Rate != nil {
		errs = append(errs, t.Rate.Validate())
	}
	if t.AttemptTimeout < Duration(time.Millisecond) || t.AttemptTimeout.D() > MaxAttemptTimeout {
		errs = append(errs, &FieldError{Field: "attempt_timeout", Problem: "must be from 1ms to 1h"})
	}
	errs = append(errs, t.Retry.Validate(), t.Ordering.Validate())
	if t.Health != nil {
		errs = append(errs, t.Health.Validate())
	}
	if t.Receipt != nil && (t.Receipt.Timeout < Duration(time.Second) || t.Receipt.Timeout.D() > MaxReceiptTimeout) {
		errs = append(errs, &FieldError{Field: "receipt.timeout", Problem: "must be from 1s to 720h"})
	}
	if t.Receipt != nil && t.Receipt.Correlate != nil {
		errs = append(errs, t.Receipt.Correlate.Validate())
	}
	if len(t.Transform) > MaxFilterLength {
		errs = append(errs, &FieldError{Field: "transform", Problem: fmt.Sprintf("must be at most %d bytes, got %d", MaxFilterLength, len(t.Transform))})
	}
	return errors.Join(errs...)
}

// Settings are the system-wide knobs, changed through commands and journaled.
type Settings struct {
	Delivery DeliverySettings `json:"delivery"`
	// CallbackMaxAttempts bounds the calls of one outcome callback; the
	// last that fails for now fails it for good. Default 10, from 1 to
	// 100; 0 stands for the default (settings saved before it existed).
	CallbackMaxAttempts int `json:"callback_max_attempts"`
	// Retention is how long settled messages are kept; the zero value,
	// also what a missing "retention" gives, keeps everything.
	Retention Retention `json:"retention"`
	// Operations pace the bulk operations.
	Operations OperationSettings `json:"operations"`
	// Callbacks bound where the messages' outcome callbacks may go, and
	// sign them.
	Callbacks CallbackSettings `json:"callbacks"`
	// Alerts sign the alert webhook's requests.
	Alerts AlertSettings `json:"alerts"`
	// Console bounds the console's live histories.
	Console ConsoleSettings `json:"console"`
}

// ConsoleSettings bound the live histories the console's message pages
// follow, each a connection and a goroutine held open. Each process counts
// its own; 0 stands for the default (settings saved before they existed).
type ConsoleSettings struct {
	// MaxStreams is how many live histories a process serves at once.
	// Default 256, from 1 to 10,000.
	MaxStreams int `json:"max_streams"`
	// MaxStreamsPerSession is how many live histories one signed-in
	// browser follows at once. Default 4, from 1 to 64.
	MaxStreamsPerSession int `json:"max_streams_per_session"`
}

// The bounds of ConsoleSettings.
const (
	DefaultMaxStreams           = 256
	MaxMaxStreams               = 10_000
	DefaultMaxStreamsPerSession = 4
	MaxMaxStreamsPerSession     = 64
)

// DeliverySettings bound the dispatch of deliveries.
type DeliverySettings struct {
	// MaxDispatches is how many unclaimed wake-ups a delivery gets before it
	// stalls. Default 5, from 1 to 20.
	MaxDispatches int `json:"max_dispatches"`
}

// The bounds of DeliverySettings.MaxDispatches.
const (
	DefaultMaxDispatches = 5
	MinMaxDispatches     = 1
	MaxMaxDispatches     = 20
)

// The bounds of Settings.CallbackMaxAttempts.
const (
	DefaultCallbackMaxAttempts = 10
	MaxCallbackMaxAttempts     = 100
)

// DefaultSettings are the settings of a database nobody configured.
func DefaultSettings() Settings {
	return Settings{}.WithDefaults()
}

// WithDefaults fills the fields left at zero with their defaults, so a
// PUT of the retention alone keeps the rest as a new database has it.
func (s Settings) WithDefaults() Settings {
	if s.Delivery.MaxDispatches == 0 {
		s.Delivery.MaxDispatches = DefaultMaxDispatches
	}
	if s.CallbackMaxAttempts == 0 {
		s.CallbackMaxAttempts = DefaultCallbackMaxAttempts
	}
	if s.Operations.Rate == 0 {
		s.Operations.Rate = DefaultOperationRate
	}
	// Empty lists, so the API answers [] rather than null.
	if s.Callbacks.AllowedNetworks == nil {
		s.Callbacks.AllowedNetworks = []string{}
	}
	if s.Callbacks.AllowedHosts == nil {
		s.Callbacks.AllowedHosts = []string{}
	}
	s.Callbacks.Signing = s.Callbacks.Signing.withDefaults()
	s.Alerts.Signing = s.Alerts.Signing.withDefaults()
	if s.Console.MaxStreams == 0 {
		s.Console.MaxStreams = DefaultMaxStreams
	}
	if s.Console.MaxStreamsPerSession == 0 {
		s.Console.MaxStreamsPerSession = DefaultMaxStreamsPerSession
	}
	return s
}

// Validate checks every field and returns all problems joined.
func (s Settings) Validate() error {
	var errs []error
	if n := s.Delivery.MaxDispatches; n < MinMaxDispatches || n > MaxMaxDispatches {
		errs = append(errs, &FieldError{Field: "delivery.max_dispatches",
			Problem: fmt.Sprintf("must be from %d to %d, got %d", MinMaxDispatches, MaxMaxDispatches, n)})
	}
	if n := s.CallbackMaxAttempts; n != 0 && (n < 1 || n > MaxCallbackMaxAttempts) {
		errs = append(errs, &FieldError{Field: "callback_max_attempts",
			Problem: fmt.Sprintf("must be from 1 to %d, got %d", MaxCallbackMaxAttempts, n)})
	}
	// 0 stands for the default, as in settings saved before it existed.
	if n := s.Operations.Rate; n != 0 && (n < MinOperationRate || n > MaxOperationRate) {
		errs = append(errs, &FieldError{Field: "operations.rate",
			Problem: fmt.Sprintf("must be from %d to %d messages per second, got %d", MinOperationRate, MaxOperationRate, n)})
	}
	if n := s.Console.MaxStreams; n != 0 && (n < 1 || n > MaxMaxStreams) {
		errs = append(errs, &FieldError{Field: "console.max_streams",
			Problem: fmt.Sprintf("must be from 1 to %d live histories, got %d", MaxMaxStreams, n)})
	}
	if n := s.Console.MaxStreamsPerSession; n != 0 && (n < 1 || n > MaxMaxStreamsPerSession) {
		errs = append(errs, &FieldError{Field: "console.max_streams_per_session",
			Problem: fmt.Sprintf("must be from 1 to %d live histories, got %d", MaxMaxStreamsPerSession, n)})
	}
	return errors.Join(append(errs, s.Retention.Validate(), s.Callbacks.Validate(),
		s.Alerts.Signing.validate("alerts.signing"))...)
}

// FieldError says which input field is wrong and what is allowed.
type FieldError struct {
	// Field is the field's path in the input's JSON form, such as
	// "retry.max_attempts" or "config.url".
	Field string
	// Problem says what is wrong and what is allowed.
	Problem string
}

// Error is "<field>: <problem>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// CheckName validates a source, target or kind name: 1 to 63 characters of
// lower-case letters, digits, '_' and '-', starting with a letter or digit,
// which keeps it safe as one token of a NATS subject and a file name.
func CheckName(field, name string) error {
	if name == "" {
		return &FieldError{Field: field, Problem: "is required: a name of 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit"}
	}
	if !isName(name) {
		return &FieldError{Field: field,
			Problem: fmt.Sprintf("%q is not a name: use 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit", name)}
	}
	return nil
}

// isName is ^[a-z0-9][a-z0-9_-]{0,62}$ without a regexp: the journal's
// decoding checks a name in most events it reads.
func isName(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// MaxPartyLength bounds party names, route patterns and a message's
// idempotency and duplicate keys.
const MaxPartyLength = 255

// CheckParty validates a party name or pattern: 1 to 255 bytes of UTF-8
// text without control characters.
func CheckParty(field, party string) error {
	if party == "" {
		return &FieldError{Field: field, Problem: fmt.Sprintf("is required: 1 to %d bytes", MaxPartyLength)}
	}
	if len(party) > MaxPartyLength {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be 1 to %d bytes", MaxPartyLength)}
	}
	return checkText(field, party)
}

// CheckKey validates a message's idempotency or duplicate key: "" (none)
// or 1 to 255 bytes of UTF-8 text without control characters.
func CheckKey(field, key string) error {
	if len(key) > MaxPartyLength {
		return &FieldError{Field: field, Problem: fmt.Sprintf("must be at most %d bytes, got %d", MaxPartyLength, len(key))}
	}
	return checkText(field, key)
}

// checkText refuses a control character, which a name, a key or a log
// line should not hold, and invalid UTF-8, which PostgreSQL's text cannot
// hold: a lookup by such a value would fail rather than find nothing.
func checkText(field, s string) error {
	for i := 0; i < len(s); {
		c, size := s[i], 1
		if c >= utf8.RuneSelf {
			_, size = utf8.DecodeRuneInString(s[i:]) // 1 when not UTF-8
		}
		if c < 0x20 || c == 0x7f || c >= utf8.RuneSelf && size == 1 {
			return &FieldError{Field: field, Problem: fmt.Sprintf("must be UTF-8 text without control characters, got %#02x at byte %d", c, i)}
		}
		i += size
	}
	return nil
}
