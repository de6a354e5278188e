package sources

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// The verification schemes of a webhook source (WebhookConfig.Verify).
const (
	SchemeStandardWebhooks = "standard-webhooks"
	SchemeGitHub           = "github"
	SchemeStripe           = "stripe"
	SchemeHMAC             = "hmac"
)

var webhookSchemes = []string{SchemeGitHub, SchemeHMAC, SchemeStandardWebhooks, SchemeStripe}

// The algorithms and encodings of the hmac scheme.
var (
	hmacAlgorithms = map[string]func() hash.Hash{"sha1": sha1.New, "sha256": sha256.New, "sha512": sha512.New}
	hmacEncodings  = []string{"hex", "base64"}
)

// The bounds of a webhook source's secrets and tolerance.
const (
	maxSecrets       = 10
	maxSecretLength  = 1024
	defaultTolerance = 5 * time.Minute
	minTolerance     = time.Second
	maxTolerance     = time.Hour
)

// The headers the schemes read.
const (
	headerGitHubSignature = "X-Hub-Signature-256"
	headerGitHubDelivery  = "X-GitHub-Delivery"
	headerGitHubEvent     = "X-GitHub-Event"
	headerStripeSignature = "Stripe-Signature"
)

// The fields of a webhook source's configuration that hold its secrets:
// verify's secret and secrets, masked where they are shown (package
// redact).
const (
	VerifyField  = "verify"
	SecretField  = "secret"
	SecretsField = "secrets"
)

// WebhookConfig is the configuration of a webhook source: requests posted
// to it without a Waybill token, stored only when their signature
// verifies.
type WebhookConfig struct {
	// Verify is how a request's signature is checked. Required.
	Verify Verify `json:"verify"`
	// From and To are the parties of every message. Default: the source's
	// name, and "*".
	From string `json:"from"`
	To   string `json:"to"`
	// Tolerance is how far a signed timestamp may be from now, either
	// way, for the schemes that sign one (standard-webhooks, stripe).
	// Default 5 min, from 1 s to 1 h.
	Tolerance lifecycle.Duration `json:"tolerance"`
	// Headers name the request headers a message keeps as its headers,
	// as forward_headers names them (targets.CheckHeaderPatterns): for
	// routes to match and targets to forward. None by default; reserved
	// headers and credentials (neverTaken) never.
	Headers []string `json:"headers,omitempty"`
	// Type is the messages' type when the request names none, as the hmac
	// scheme never does; none by default.
	Type string `json:"type,omitempty"`
}

// neverTaken are the request headers no pattern of a webhook source takes:
// credentials, which every reader of the message would see and a target
// might forward.
var neverTaken = []string{"authorization", "cookie"}

// Verify is a webhook source's check of a request's signature.
type Verify struct {
	// Scheme is standard-webhooks, github, stripe or hmac. Required.
	Scheme string `json:"scheme"`
	// Secret is one secret; Prepare moves it into Secrets, the form kept.
	Secret string `json:"secret,omitempty"`
	// Secrets are the sender's secrets, 1 to 10: a signature made with any
	// of them verifies, so a sender can rotate. For standard-webhooks each
	// is whsec_ and the base64 of 24 to 64 bytes; for the others the
	// secret as the provider shows it, used as its bytes.
	Secrets []string `json:"secrets,omitempty"`
	// Header, Algorithm, Encoding and Prefix are the hmac scheme's: the
	// header that carries the signature, the hash (sha1, sha256, sha512;
	// default sha256), how the MAC is written (hex or base64; default hex)
	// and what comes before it in the header, such as "sha256=" (none by
	// default).
	Header    string `json:"header,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	// IDHeader is the hmac scheme's header of the delivery's id, which
	// makes a repeat an idempotent one; none by default.
	IDHeader string `json:"id_header,omitempty"`
}

// UnmarshalJSON reads a Verify, refusing a field it does not have: a
// secret misspelled would otherwise be dropped unseen.
func (v *Verify) UnmarshalJSON(b []byte) error {
	type plain Verify
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode((*plain)(v)); err != nil {
		return fmt.Errorf("must be an object of scheme, secret or secrets, header, algorithm, encoding, prefix and id_header: %v", err)
	}
	return nil
}

func (c *WebhookConfig) check(source string) error {
	var errs []error
	if c.From == "" {
		c.From = source
	}
	if c.To == "" {
		c.To = lifecycle.AnyParty
	}
	errs = append(errs, lifecycle.CheckParty("config.from", c.From), lifecycle.CheckParty("config.to", c.To),
		checkDuration("tolerance", &c.Tolerance, defaultTolerance, minTolerance, maxTolerance), c.Verify.check(),
		lifecycle.CheckMessageType("config.type", c.Type))
	errs = append(errs, targets.CheckHeaderPatterns("config.headers", c.Headers)...)
	for i, p := range c.Headers {
		if slices.Contains(neverTaken, strings.ToLower(p)) {
			errs = append(errs, &lifecycle.FieldError{Field: fmt.Sprintf("config.headers[%d]", i),
				Problem: fmt.Sprintf("%q is a credential: a webhook source never keeps %s", p, strings.Join(neverTaken, " or "))})
		}
	}
	return errors.Join(errs...)
}

func (v *Verify) check() error {
	field := func(name, problem string) error {
		return &lifecycle.FieldError{Field: "config.verify." + name, Problem: problem}
	}
	var errs []error
	if !slices.Contains(webhookSchemes, v.Scheme) {
		errs = append(errs, field("scheme", fmt.Sprintf("%q: allowed are %s", v.Scheme, strings.Join(webhookSchemes, ", "))))
	}
	switch {
	case v.Secret != "" && len(v.Secrets) > 0:
		errs = append(errs, field("secret", "give secret (one) or secrets (several), not both"))
	case v.Secret != "":
		v.Secrets, v.Secret = []string{v.Secret}, ""
	case len(v.Secrets) == 0:
		errs = append(errs, field("secrets", "is required: give secret, or secrets for several"))
	case len(v.Secrets) > maxSecrets:
		errs = append(errs, field("secrets", fmt.Sprintf("at most %d, got %d", maxSecrets, len(v.Secrets))))
	}
	for i, s := range v.Secrets {
		name := fmt.Sprintf("secrets[%d]", i)
		switch {
		case v.Scheme == SchemeStandardWebhooks:
			// Its problem names no secret: it may be one written
			// almost right.
			if _, err := targets.ParseKey(targets.SchemeHMAC, s); err != nil {
				errs = append(errs, field(name, "must be whsec_ and the base64 of 24 to 64 bytes"))
			}
		case s == "" || len(s) > maxSecretLength:
			errs = append(errs, field(name, fmt.Sprintf("must be 1 to %d bytes", maxSecretLength)))
		}
	}
	if v.Scheme == SchemeHMAC {
		if v.Algorithm == "" {
			v.Algorithm = "sha256"
		}
		if v.Encoding == "" {
			v.Encoding = "hex"
		}
		if _, ok := hmacAlgorithms[v.Algorithm]; !ok {
			errs = append(errs, field("algorithm", fmt.Sprintf("%q: allowed are sha1, sha256, sha512", v.Algorithm)))
		}
		if !slices.Contains(hmacEncodings, v.Encoding) {
			errs = append(errs, field("encoding", fmt.Sprintf("%q: allowed are %s", v.Encoding, strings.Join(hmacEncodings, ", "))))
		}
		errs = append(errs, checkHeaderName(field, "header", v.Header, true), checkHeaderName(field, "id_header", v.IDHeader, false))
		if len(v.Prefix) > 64 || strings.ContainsFunc(v.Prefix, func(r rune) bool { return r < 0x21 || r >= 0x7f }) {
			errs = append(errs, field("prefix", "must be up to 64 printable ASCII characters, no spaces"))
		}
		return errors.Join(errs...)
	}
	for _, f := range []struct{ name, value string }{{"header", v.Header}, {"algorithm", v.Algorithm},
		{"encoding", v.Encoding}, {"prefix", v.Prefix}, {"id_header", v.IDHeader}} {
		if f.value != "" {
			errs = append(errs, field(f.name, "is only for the hmac scheme: "+v.Scheme+" names its own"))
		}
	}
	return errors.Join(errs...)
}

// checkHeaderName checks a header's name: letters, digits and -, up to
// 64 bytes; required or not.
func checkHeaderName(field func(name, problem string) error, name, value string, required bool) error {
	if value == "" {
		if required {
			return field(name, "is required: the name of a request header, such as X-Signature")
		}
		return nil
	}
	ok := len(value) <= 64 && !strings.ContainsFunc(value, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-')
	})
	if !ok {
		return field(name, fmt.Sprintf("%q is not a header name: up to 64 letters, digits and -", value))
	}
	return nil
}

// Webhook reads the configuration of a prepared webhook source.
func Webhook(s lifecycle.Source) (WebhookConfig, error) {
	return read[WebhookConfig](s, KindWebhook)
}

// The reasons a request is refused, as waybill_ingest_refused_total counts
// them.
const (
	// RefusedMissingHeader: a header the scheme needs is absent or cannot
	// be read.
	RefusedMissingHeader = "missing_header"
	// RefusedTimestamp: the signed timestamp is outside the tolerance.
	RefusedTimestamp = "timestamp"
	// RefusedSignature: no signature verifies with any secret.
	RefusedSignature = "signature"
)

// RefusedReasons are the reasons of a refusal, in name order.
var RefusedReasons = []string{RefusedMissingHeader, RefusedSignature, RefusedTimestamp}

// ErrUnverified is what every refusal of a webhook request wraps.
var ErrUnverified = errors.New("the request's signature does not verify")

// Unverified is a webhook request refused: Reason is one of the Refused
// constants and Detail says more, for the server's log only: nothing of it
// goes back to the sender, who may be a forger.
type Unverified struct {
	Reason string
	Detail string
}

func (e *Unverified) Error() string { return ErrUnverified.Error() + ": " + e.Reason + ": " + e.Detail }

// Unwrap makes errors.Is(err, ErrUnverified) hold.
func (e *Unverified) Unwrap() error { return ErrUnverified }

// Inbound is what a verified webhook request says of itself.
type Inbound struct {
	// ID is the sender's id of the delivery, the same on every retry of
	// it; empty when the scheme names none.
	ID string
	// Type is the provider's event type, when it names one that is a
	// message type (lifecycle.CheckMessageType); else the source's type.
	Type string
	// Headers are the request's headers the source's patterns take, names
	// lower case, several values of one joined by ", "; nil for none.
	Headers map[string]string
}

// maxDeliveryID bounds the id a sender gives its delivery: the key
// WebhookKeyPrefix and the id make must fit an idempotency key.
const maxDeliveryID = lifecycle.MaxPartyLength - len(WebhookKeyPrefix)

// Check verifies a request's headers and body by the source's scheme at
// now and returns what it says of itself; a refusal is an *Unverified.
// The timestamp, where the scheme signs one, must be within the
// tolerance of now either way.
func (c WebhookConfig) Check(h http.Header, body []byte, now time.Time) (Inbound, error) {
	var in Inbound
	var err error
	switch c.Verify.Scheme {
	case SchemeStandardWebhooks:
		in, err = c.standardWebhooks(h, body, now)
	case SchemeGitHub:
		in, err = c.github(h, body)
	case SchemeStripe:
		in, err = c.stripe(h, body, now)
	case SchemeHMAC:
		in, err = c.hmac(h, body)
	default:
		err = &Unverified{Reason: RefusedSignature, Detail: fmt.Sprintf("no scheme %q", c.Verify.Scheme)}
	}
	if err != nil {
		return Inbound{}, err
	}
	if in.Type == "" || lifecycle.CheckMessageType("type", in.Type) != nil {
		in.Type = c.Type
	}
	in.Headers = c.messageHeaders(h)
	return in, nil
}

// messageHeaders are the headers of h the source's patterns take.
func (c WebhookConfig) messageHeaders(h http.Header) map[string]string {
	var out map[string]string
	for _, name := range slices.Sorted(maps.Keys(h)) {
		lower := strings.ToLower(name)
		if slices.Contains(neverTaken, lower) || !targets.HeaderPatternsTake(c.Headers, lower) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		value := strings.Join(h[name], ", ")
		if prev, ok := out[lower]; ok {
			value = prev + ", " + value
		}
		out[lower] = value
	}
	return out
}

// header is the one value of the header name, or a refusal when there is
// none or several.
func header(h http.Header, name string) (string, error) {
	values := h.Values(name)
	if len(values) != 1 || values[0] == "" {
		return "", &Unverified{Reason: RefusedMissingHeader, Detail: fmt.Sprintf("%s: %d values, want one", name, len(values))}
	}
	return values[0], nil
}

// deliveryID reads the id header name: 1 to maxDeliveryID bytes of
// printable ASCII.
func deliveryID(h http.Header, name string) (string, error) {
	id, err := header(h, name)
	if err != nil {
		return "", err
	}
	if len(id) > maxDeliveryID || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
		return "", &Unverified{Reason: RefusedMissingHeader,
			Detail: fmt.Sprintf("%s: must be 1 to %d bytes of printable ASCII", name, maxDeliveryID)}
	}
	return id, nil
}

// timestamp reads Unix seconds and checks them against now.
func (c WebhookConfig) timestamp(text string, now time.Time) (time.Time, error) {
	sec, err := strconv.ParseInt(text, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != text {
		return time.Time{}, &Unverified{Reason: RefusedTimestamp, Detail: fmt.Sprintf("%q is not Unix seconds", text)}
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > c.Tolerance.D() || d < -c.Tolerance.D() {
		return time.Time{}, &Unverified{Reason: RefusedTimestamp, Detail: fmt.Sprintf("%s is %s from now, beyond %s", ts.UTC().Format(time.RFC3339), d, c.Tolerance.D())}
	}
	return ts, nil
}

// bodyFields are the fields a JSON body may name itself by: Stripe's
// event id and type, and the type of a Standard Webhooks payload.
type bodyFields struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// fieldsOf reads the body's id and type, where it is a JSON object that
// has them as strings; nothing otherwise.
func fieldsOf(body []byte) bodyFields {
	var f struct {
		ID   json.RawMessage `json:"id"`
		Type json.RawMessage `json:"type"`
	}
	var out bodyFields
	if json.Unmarshal(body, &f) != nil {
		return out
	}
	_ = json.Unmarshal(f.ID, &out.ID) // a field that is not a string is no id
	_ = json.Unmarshal(f.Type, &out.Type)
	return out
}

// standardWebhooks verifies by the Standard Webhooks specification:
// webhook-signature lists signatures apart by spaces, each a version and
// a base64 MAC; a v1 (HMAC-SHA256 of "{id}.{timestamp}.{body}") that any
// secret makes verifies. The signature is made as targets.Sign makes
// Waybill's own.
func (c WebhookConfig) standardWebhooks(h http.Header, body []byte, now time.Time) (Inbound, error) {
	id, err := deliveryID(h, targets.HeaderWebhookID)
	if err != nil {
		return Inbound{}, err
	}
	tsText, err := header(h, targets.HeaderWebhookTimestamp)
	if err != nil {
		return Inbound{}, err
	}
	signatures, err := header(h, targets.HeaderWebhookSignature)
	if err != nil {
		return Inbound{}, err
	}
	ts, err := c.timestamp(tsText, now)
	if err != nil {
		return Inbound{}, err
	}
	for _, secret := range c.Verify.Secrets {
		key, err := targets.ParseKey(targets.SchemeHMAC, secret)
		if err != nil {
			continue // Prepare checked it
		}
		want := []byte(targets.Sign([]targets.Key{key}, id, ts, body))
		for _, sig := range strings.Fields(signatures) {
			if hmac.Equal([]byte(sig), want) {
				return Inbound{ID: id, Type: fieldsOf(body).Type}, nil
			}
		}
	}
	return Inbound{}, &Unverified{Reason: RefusedSignature, Detail: "no v1 signature matches a secret"}
}

// github verifies X-Hub-Signature-256: sha256= and the hex of the
// HMAC-SHA256 of the body. GitHub signs no time: a repeat is told by its
// X-GitHub-Delivery only.
func (c WebhookConfig) github(h http.Header, body []byte) (Inbound, error) {
	sig, err := header(h, headerGitHubSignature)
	if err != nil {
		return Inbound{}, err
	}
	id, err := deliveryID(h, headerGitHubDelivery)
	if err != nil {
		return Inbound{}, err
	}
	mac, err := decodeMAC(sig, "sha256=", "hex")
	if err != nil {
		return Inbound{}, err
	}
	if !c.anySecret(sha256.New, mac, body) {
		return Inbound{}, &Unverified{Reason: RefusedSignature, Detail: "the signature matches no secret"}
	}
	return Inbound{ID: id, Type: h.Get(headerGitHubEvent)}, nil
}

// stripe verifies Stripe-Signature: t=<Unix seconds>,v1=<hex>[,v1=…], each
// v1 the HMAC-SHA256 of "{t}.{body}" under the endpoint's secret used as
// it is written (whsec_ and all). The event's id and type are the body's.
// Each secret's MAC is made once and compared with every v1, of which
// there are at most maxStripeSignatures: a request that anyone may send
// must not make the server hash its body once for each value it lists.
func (c WebhookConfig) stripe(h http.Header, body []byte, now time.Time) (Inbound, error) {
	sig, err := header(h, headerStripeSignature)
	if err != nil {
		return Inbound{}, err
	}
	var tsText string
	var macs [][]byte
	v1s := 0
	for part := range strings.SplitSeq(sig, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			if tsText != "" {
				return Inbound{}, &Unverified{Reason: RefusedMissingHeader, Detail: "Stripe-Signature: t twice"}
			}
			tsText = v
		case "v1":
			if v1s++; v1s > maxStripeSignatures {
				return Inbound{}, &Unverified{Reason: RefusedMissingHeader,
					Detail: fmt.Sprintf("Stripe-Signature: more than %d v1 signatures", maxStripeSignatures)}
			}
			if mac, err := hex.DecodeString(v); err == nil && len(mac) == sha256.Size {
				macs = append(macs, mac)
			}
		}
	}
	if tsText == "" {
		return Inbound{}, &Unverified{Reason: RefusedMissingHeader, Detail: "Stripe-Signature: no t"}
	}
	if _, err := c.timestamp(tsText, now); err != nil {
		return Inbound{}, err
	}
	signed := make([]byte, 0, len(tsText)+1+len(body))
	signed = append(append(append(signed, tsText...), '.'), body...)
	for _, secret := range c.Verify.Secrets {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(signed)
		want := m.Sum(nil)
		for _, mac := range macs {
			if hmac.Equal(want, mac) {
				f := fieldsOf(body)
				return Inbound{ID: validID(f.ID), Type: f.Type}, nil
			}
		}
	}
	return Inbound{}, &Unverified{Reason: RefusedSignature, Detail: fmt.Sprintf("none of %d v1 signatures matches a secret", len(macs))}
}

// maxStripeSignatures is the most v1 signatures a Stripe-Signature may
// list: Stripe lists one for each secret it signs with, two while a
// secret is rolled.
const maxStripeSignatures = 8

// validID is an id read from a body when it fits a key, else none.
func validID(id string) string {
	if len(id) > maxDeliveryID || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
		return ""
	}
	return id
}

// hmac verifies the configured header: Prefix and the MAC of the body in
// Encoding, by Algorithm. No time is signed.
func (c WebhookConfig) hmac(h http.Header, body []byte) (Inbound, error) {
	v := c.Verify
	sig, err := header(h, v.Header)
	if err != nil {
		return Inbound{}, err
	}
	var id string
	if v.IDHeader != "" {
		if id, err = deliveryID(h, v.IDHeader); err != nil {
			return Inbound{}, err
		}
	}
	mac, err := decodeMAC(sig, v.Prefix, v.Encoding)
	if err != nil {
		return Inbound{}, err
	}
	algorithm, ok := hmacAlgorithms[v.Algorithm]
	if !ok || !c.anySecret(algorithm, mac, body) {
		return Inbound{}, &Unverified{Reason: RefusedSignature, Detail: "the signature matches no secret"}
	}
	return Inbound{ID: id}, nil
}

// decodeMAC reads a signature written as prefix and the MAC in encoding.
func decodeMAC(sig, prefix, encoding string) ([]byte, error) {
	text, ok := strings.CutPrefix(sig, prefix)
	var mac []byte
	var err error
	if ok {
		if encoding == "base64" {
			mac, err = base64.StdEncoding.DecodeString(text)
		} else {
			mac, err = hex.DecodeString(text)
		}
	}
	if !ok || err != nil || len(mac) == 0 {
		return nil, &Unverified{Reason: RefusedSignature, Detail: fmt.Sprintf("not %q and a MAC in %s", prefix, encoding)}
	}
	return mac, nil
}

// anySecret reports whether mac is the HMAC of data under any of the
// secrets, taken as their bytes; compared in constant time.
func (c WebhookConfig) anySecret(algorithm func() hash.Hash, mac, data []byte) bool {
	for _, secret := range c.Verify.Secrets {
		m := hmac.New(algorithm, []byte(secret))
		m.Write(data)
		if hmac.Equal(m.Sum(nil), mac) {
			return true
		}
	}
	return false
}
