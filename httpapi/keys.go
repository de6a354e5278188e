package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// TargetSecret is the body of GET /targets/{name}/secret: the target's
// signing scheme and the keys that sign now, oldest first; none for a
// target that does not sign.
type TargetSecret struct {
	Target string      `json:"target"`
	Scheme string      `json:"scheme"`
	Keys   []SecretKey `json:"keys"`
}

// OwnSecret is the body of GET /callbacks/secret and /alerts/secret: the
// scheme the settings choose for Waybill's own requests of Owner and the
// keys that sign them now, oldest first; none when the scheme is none.
type OwnSecret struct {
	// Owner is callbacks or alerts.
	Owner  string      `json:"owner"`
	Scheme string      `json:"scheme"`
	Keys   []SecretKey `json:"keys"`
}

// SecretKey is one signing key as an admin sees it.
type SecretKey struct {
	ID        string    `json:"id"`
	Scheme    string    `json:"scheme"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when a key a rotation retired stops signing.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Secret is the key to verify with for hmac-sha256 (whsec_…), the key
	// to sign with for ed25519 (whsk_…).
	Secret string `json:"secret"`
	// PublicKey is an ed25519 key's public key (whpk_…), the one a
	// receiver verifies with.
	PublicKey   string `json:"public_key,omitempty"`
	Fingerprint string `json:"fingerprint"`
}

// RotateRequest is the body of the rotations (POST …/secret/rotate),
// which may be left out.
type RotateRequest struct {
	// Grace is how long the keys that sign now go on signing beside the
	// new one: 0s to 168h, default 24h.
	Grace *lifecycle.Duration `json:"grace"`
	// Key is the new key in its text form, instead of a new one.
	Key string `json:"key"`
}

// secretKeys are keys as an admin sees them.
func secretKeys(keys []targets.Key) []SecretKey {
	out := make([]SecretKey, 0, len(keys))
	for _, k := range keys {
		sk := SecretKey{ID: k.ID, Scheme: k.Scheme, CreatedAt: k.CreatedAt,
			Secret: k.SecretText(), PublicKey: k.PublicText(), Fingerprint: k.Fingerprint()}
		if !k.ExpiresAt.IsZero() {
			sk.ExpiresAt = &k.ExpiresAt
		}
		out = append(out, sk)
	}
	return out
}

// getTargetSecret shows a target's signing keys, to an admin only
// (permission).
func (s *Server) getTargetSecret(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	return s.writeTargetSecret(w, r, name)
}

func (s *Server) writeTargetSecret(w http.ResponseWriter, r *http.Request, name string) error {
	all, err := s.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(all, func(t lifecycle.Target) bool { return t.Name == name })
	if i < 0 {
		return fmt.Errorf("target %s: %w", name, commands.ErrNotFound)
	}
	out := TargetSecret{Target: name, Scheme: targets.SchemeNone, Keys: []SecretKey{}}
	if t := all[i]; targets.Signs(t) {
		out.Scheme = t.Signing.Scheme
		keys, err := s.cfg.Writer.TargetKeys(r.Context(), name)
		if err != nil {
			return err
		}
		out.Keys = secretKeys(keys)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readRotation reads a rotation's body: its grace, the default when left
// out, and the key given, if any.
func (s *Server) readRotation(w http.ResponseWriter, r *http.Request) (time.Duration, string, error) {
	var req RotateRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return 0, "", err
	}
	grace := commands.DefaultKeyGrace
	if req.Grace != nil {
		grace = req.Grace.D()
	}
	return grace, req.Key, nil
}

// rotateTargetSecret gives a target a new signing key, the old ones
// signing beside it for the grace, and answers as getTargetSecret does.
func (s *Server) rotateTargetSecret(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	grace, key, err := s.readRotation(w, r)
	if err != nil {
		return err
	}
	k, err := s.cfg.Writer.RotateTargetKey(r.Context(), name, grace, key, actor(r))
	if err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("target key rotated", "target", name, "key", k.ID, "grace", grace, "operator", identity(r).Name)
	return s.writeTargetSecret(w, r, name)
}

// ownOwner maps the path's owner to the reserved owner of its keys.
var ownOwner = map[string]string{"callbacks": lifecycle.KeyOwnerCallbacks, "alerts": lifecycle.KeyOwnerAlerts}

// ownSecret makes the handler of GET /{owner}/secret, showing the keys
// of Waybill's own requests of owner (callbacks, alerts) to an admin
// only (permission).
func ownSecret(owner string) func(*Server, http.ResponseWriter, *http.Request) error {
	return func(s *Server, w http.ResponseWriter, r *http.Request) error {
		return s.writeOwnSecret(w, r, owner)
	}
}

// rotateOwnSecret makes the handler of POST /{owner}/secret/rotate.
func rotateOwnSecret(owner string) func(*Server, http.ResponseWriter, *http.Request) error {
	return func(s *Server, w http.ResponseWriter, r *http.Request) error {
		grace, key, err := s.readRotation(w, r)
		if err != nil {
			return err
		}
		k, err := s.cfg.Writer.RotateOwnKey(r.Context(), ownOwner[owner], grace, key, actor(r))
		if err != nil {
			return err
		}
		s.configChanged()
		s.log.Info("signing key rotated", "owner", owner, "key", k.ID, "grace", grace, "operator", identity(r).Name)
		return s.writeOwnSecret(w, r, owner)
	}
}

func (s *Server) writeOwnSecret(w http.ResponseWriter, r *http.Request, owner string) error {
	settings, err := s.cfg.Writer.Settings(r.Context())
	if err != nil {
		return err
	}
	scheme := settings.Callbacks.Signing.Scheme
	if owner == "alerts" {
		scheme = settings.Alerts.Signing.Scheme
	}
	keys, err := s.cfg.Writer.OwnKeys(r.Context(), ownOwner[owner])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, OwnSecret{Owner: owner, Scheme: scheme, Keys: secretKeys(keys)})
	return nil
}
