package journal

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// The kinds of the signing keys' rotations and of Waybill's own keys
// (the callbacks' and the alert webhook's), on the config stream. A
// target's first key is TargetKeyAdded.
const (
	KindTargetKeyRotated  Kind = "target.key_rotated"
	KindSigningKeyAdded   Kind = "signing.key_added"
	KindSigningKeyRotated Kind = "signing.key_rotated"
)

// RetiredKey is a key a rotation ended: it signs until ExpiresAt, the
// rotation's time when it ended at once.
type RetiredKey struct {
	KeyID     string    `json:"key_id"`
	ExpiresAt time.Time `json:"expires_at"`
}

// TargetKeyRotated: a target got a new signing key, stored sealed beside
// it, and its keys that signed ended (Retired); the target.updated of the
// same transaction carries the definition's new signing.keys. Keys are
// named by id and fingerprint, never by their material.
type TargetKeyRotated struct {
	Target      string       `json:"target"`
	KeyID       string       `json:"key_id"`
	Scheme      string       `json:"scheme"`
	Fingerprint string       `json:"fingerprint"`
	Retired     []RetiredKey `json:"retired"`
}

func (*TargetKeyRotated) Kind() Kind { return KindTargetKeyRotated }
func (p *TargetKeyRotated) Text() string {
	return fmt.Sprintf("target %s: %s", p.Target, rotationText(p.Scheme, p.KeyID, p.Fingerprint, p.Retired))
}
func (p *TargetKeyRotated) Validate() error {
	return errors.Join(lifecycle.CheckName("target", p.Target), checkKey(p.KeyID, p.Scheme, p.Fingerprint), checkRetired(p.Retired))
}

// SigningKeyAdded: Waybill's own signing key for the callbacks or the
// alert webhook (Owner, one of lifecycle.KeyOwners) was made, when first
// needed, or for a scheme the settings changed to.
type SigningKeyAdded struct {
	Owner       string `json:"owner"`
	KeyID       string `json:"key_id"`
	Scheme      string `json:"scheme"`
	Fingerprint string `json:"fingerprint"`
}

func (*SigningKeyAdded) Kind() Kind { return KindSigningKeyAdded }
func (p *SigningKeyAdded) Text() string {
	return fmt.Sprintf("%s: %s signing key %s added (%s)", p.Owner, p.Scheme, p.KeyID, p.Fingerprint)
}
func (p *SigningKeyAdded) Validate() error {
	return errors.Join(checkOwner(p.Owner), checkKey(p.KeyID, p.Scheme, p.Fingerprint))
}

// SigningKeyRotated: Waybill's own key of Owner was replaced by a new
// one, as a target's is (TargetKeyRotated).
type SigningKeyRotated struct {
	Owner       string       `json:"owner"`
	KeyID       string       `json:"key_id"`
	Scheme      string       `json:"scheme"`
	Fingerprint string       `json:"fingerprint"`
	Retired     []RetiredKey `json:"retired"`
}

func (*SigningKeyRotated) Kind() Kind { return KindSigningKeyRotated }
func (p *SigningKeyRotated) Text() string {
	return fmt.Sprintf("%s: %s", p.Owner, rotationText(p.Scheme, p.KeyID, p.Fingerprint, p.Retired))
}
func (p *SigningKeyRotated) Validate() error {
	return errors.Join(checkOwner(p.Owner), checkKey(p.KeyID, p.Scheme, p.Fingerprint), checkRetired(p.Retired))
}

func checkOwner(owner string) error {
	if !slices.Contains(lifecycle.KeyOwners, owner) {
		return field("owner", fmt.Sprintf("%q: allowed are %s", owner, strings.Join(lifecycle.KeyOwners, ", ")))
	}
	return nil
}

func checkKey(id, scheme, fingerprint string) error {
	return errors.Join(required("key_id", id != ""), required("scheme", scheme != ""), required("fingerprint", fingerprint != ""))
}

func checkRetired(retired []RetiredKey) error {
	for _, r := range retired {
		if r.KeyID == "" || r.ExpiresAt.IsZero() {
			return field("retired", "each names a key_id and its expires_at")
		}
	}
	return nil
}

func rotationText(scheme, id, fingerprint string, retired []RetiredKey) string {
	text := fmt.Sprintf("%s signing key %s (%s) rotated in", scheme, id, fingerprint)
	for _, r := range retired {
		text += fmt.Sprintf("; %s signs until %s", r.KeyID, r.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return text
}
