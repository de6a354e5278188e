package targets

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// The signing schemes of an http target (lifecycle.Signing.Scheme).
const (
	SchemeHMAC    = "hmac-sha256"
	SchemeEd25519 = "ed25519"
	SchemeNone    = "none"
)

var schemes = lifecycle.SigningSchemes

// The prefixes of the keys' text forms, the specification's.
const (
	hmacPrefix   = "whsec_"
	secretPrefix = "whsk_"
	publicPrefix = "whpk_"
)

// The bounds of an HMAC secret, and the size of one Waybill makes.
const (
	minHMACSecret = 24
	maxHMACSecret = 64
	newHMACSecret = 32
)

// The headers of a signed attempt.
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// Key is one signing key of a target.
type Key struct {
	// ID names the key in the journal and the API.
	ID     string
	Scheme string
	// Secret is the HMAC secret, or the ed25519 private key.
	Secret []byte
	// Public is the ed25519 public key; nil for HMAC.
	Public    []byte
	CreatedAt time.Time
	// ExpiresAt is when the key stops signing; zero: never.
	ExpiresAt time.Time
}

// checkSigning fills the default scheme of an http target's signing and
// checks it, the key given included.
func checkSigning(s *lifecycle.Signing) error {
	if s.Scheme == "" {
		s.Scheme = SchemeHMAC
	}
	if !slices.Contains(schemes, s.Scheme) {
		return &lifecycle.FieldError{Field: "signing.scheme",
			Problem: fmt.Sprintf("%q: allowed are %s", s.Scheme, strings.Join(schemes, ", "))}
	}
	if s.Key == "" {
		return nil
	}
	if s.Scheme == SchemeNone {
		return &lifecycle.FieldError{Field: "signing.key", Problem: `a target whose scheme is "none" takes no key`}
	}
	_, err := ParseKey(s.Scheme, s.Key)
	return err
}

// ParseKey reads a key given in its text form: whsec_ and the base64 of
// 24 to 64 bytes for hmac-sha256, whsk_ and the base64 of an ed25519
// seed (32 bytes) for ed25519. Its ID and times are left to the caller.
func ParseKey(scheme, text string) (Key, error) {
	switch scheme {
	case SchemeHMAC:
		b64, ok := strings.CutPrefix(text, hmacPrefix)
		secret, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(secret) < minHMACSecret || len(secret) > maxHMACSecret {
			return Key{}, &lifecycle.FieldError{Field: "signing.key",
				Problem: fmt.Sprintf("an hmac-sha256 key is %s and the base64 of %d to %d bytes", hmacPrefix, minHMACSecret, maxHMACSecret)}
		}
		return Key{Scheme: scheme, Secret: secret}, nil
	case SchemeEd25519:
		b64, ok := strings.CutPrefix(text, secretPrefix)
		seed, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || len(seed) != ed25519.SeedSize {
			return Key{}, &lifecycle.FieldError{Field: "signing.key",
				Problem: fmt.Sprintf("an ed25519 key is %s and the base64 of its %d-byte seed", secretPrefix, ed25519.SeedSize)}
		}
		private := ed25519.NewKeyFromSeed(seed)
		return Key{Scheme: scheme, Secret: private, Public: private.Public().(ed25519.PublicKey)}, nil
	}
	return Key{}, &lifecycle.FieldError{Field: "signing.scheme", Problem: fmt.Sprintf("%q signs with no key", scheme)}
}

// NewKey makes a target's key of the scheme: the one given in text form,
// or a new one (32 random bytes for HMAC, a new ed25519 pair), with a new
// id, made at now.
func NewKey(scheme, given string, now time.Time) (Key, error) {
	var k Key
	switch {
	case given != "":
		var err error
		if k, err = ParseKey(scheme, given); err != nil {
			return Key{}, err
		}
	case scheme == SchemeHMAC:
		k = Key{Scheme: scheme, Secret: make([]byte, newHMACSecret)}
		rand.Read(k.Secret)
	case scheme == SchemeEd25519:
		public, private, err := ed25519.GenerateKey(nil)
		if err != nil {
			return Key{}, err
		}
		k = Key{Scheme: scheme, Secret: private, Public: public}
	default:
		return Key{}, &lifecycle.FieldError{Field: "signing.scheme", Problem: fmt.Sprintf("%q signs with no key", scheme)}
	}
	k.ID = "key_" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
	k.CreatedAt = now
	return k, nil
}

// SecretText is the key's secret in the specification's text form:
// whsec_ for HMAC, whsk_ and the seed for ed25519.
func (k Key) SecretText() string {
	if k.Scheme == SchemeEd25519 {
		return secretPrefix + base64.StdEncoding.EncodeToString(ed25519.PrivateKey(k.Secret).Seed())
	}
	return hmacPrefix + base64.StdEncoding.EncodeToString(k.Secret)
}

// PublicText is an ed25519 key's public key in the specification's text
// form, whpk_; empty for HMAC.
func (k Key) PublicText() string {
	if k.Public == nil {
		return ""
	}
	return publicPrefix + base64.StdEncoding.EncodeToString(k.Public)
}

// Fingerprint names the key's material without revealing it: sha256: and
// the first 16 bytes, in hex, of the SHA-256 of the public key (ed25519)
// or of the secret (HMAC). The journal records it.
func (k Key) Fingerprint() string {
	material := k.Secret
	if k.Public != nil {
		material = k.Public
	}
	sum := sha256.Sum256(material)
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// live reports whether the key signs at t.
func (k Key) live(t time.Time) bool { return k.ExpiresAt.IsZero() || t.Before(k.ExpiresAt) }

// SignHeaders sets the Standard Webhooks headers of a request whose body
// is body, signed with keys (none: it sets nothing): webhook-id, id;
// webhook-timestamp, at; webhook-signature, Sign's, when a key is live at
// at. Every request Waybill signs is signed by it: a target's attempts,
// the outcome callbacks, the alert webhook.
func SignHeaders(h http.Header, keys []Key, id string, at time.Time, body []byte) {
	if len(keys) == 0 {
		return
	}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(at.Unix(), 10))
	if sig := Sign(keys, id, at, body); sig != "" {
		h.Set(HeaderWebhookSignature, sig)
	}
}

// Sign returns the webhook-signature header of the content id, timestamp
// and body under the keys live at the timestamp: one signature per key,
// space-separated, v1 for HMAC-SHA256 and v1a for ed25519, each over
// exactly "{id}.{timestamp}.{body}".
func Sign(keys []Key, id string, timestamp time.Time, body []byte) string {
	ts := strconv.FormatInt(timestamp.Unix(), 10)
	content := make([]byte, 0, len(id)+len(ts)+2+len(body))
	content = append(append(append(append(append(content, id...), '.'), ts...), '.'), body...)
	var b strings.Builder
	for _, k := range keys {
		if !k.live(timestamp) {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		switch k.Scheme {
		case SchemeEd25519:
			b.WriteString("v1a,")
			b.WriteString(base64.StdEncoding.EncodeToString(ed25519.Sign(ed25519.PrivateKey(k.Secret), content)))
		default:
			mac := hmac.New(sha256.New, k.Secret)
			mac.Write(content)
			b.WriteString("v1,")
			b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		}
	}
	return b.String()
}

// Tolerance is how far from the receiver's clock Verify accepts a
// webhook-timestamp, the specification's recommendation: a request
// captured is refused once it is older.
const Tolerance = 5 * time.Minute

// Verify checks a request's Standard Webhooks headers as a receiver does,
// by the specification rather than by Sign: the timestamp within
// Tolerance of now, and one signature of the header made with key over
// "{webhook-id}.{webhook-timestamp}.{body}" (v1, HMAC-SHA256, or v1a,
// ed25519, verified with the public key alone).
func Verify(h http.Header, body []byte, key Key, now time.Time) error {
	id, ts, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return errors.New("verify: the webhook-id, webhook-timestamp or webhook-signature header is missing")
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("verify: webhook-timestamp %q is not Unix seconds", ts)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("verify: webhook-timestamp %s is more than %s from now", ts, Tolerance)
	}
	content := []byte(id + "." + ts + "." + string(body))
	prefix := "v1,"
	if key.Scheme == SchemeEd25519 {
		prefix = "v1a,"
	}
	for sig := range strings.FieldsSeq(sigs) {
		b64, ok := strings.CutPrefix(sig, prefix)
		got, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil {
			continue
		}
		if key.Scheme == SchemeEd25519 {
			if ed25519.Verify(ed25519.PublicKey(key.Public), content, got) {
				return nil
			}
			continue
		}
		mac := hmac.New(sha256.New, key.Secret)
		mac.Write(content)
		if hmac.Equal(got, mac.Sum(nil)) {
			return nil
		}
	}
	return fmt.Errorf("verify: no signature of key %s matches", key.ID)
}
