package lifecycle

import (
	"fmt"
	"slices"
	"strings"
)

// SigningSchemes are the schemes a signing key may be of, the default
// first: an http target's signing.scheme, callbacks.signing.scheme and
// alerts.signing.scheme.
var SigningSchemes = []string{"hmac-sha256", "ed25519", "none"}

// The owners of Waybill's own signing keys, beside the targets' (whose
// owner is the target's name): no target name starts with '@' (CheckName).
const (
	KeyOwnerCallbacks = "@callbacks"
	KeyOwnerAlerts    = "@alerts"
)

// KeyOwners are the reserved owners of keys.
var KeyOwners = []string{KeyOwnerCallbacks, KeyOwnerAlerts}

// SigningSettings choose how the requests Waybill sends on its own
// behalf (the outcome callbacks, the alert webhook) are signed. Their
// keys are Waybill's own, made when first needed.
type SigningSettings struct {
	// Scheme is hmac-sha256 (the default), ed25519 or none.
	Scheme string `json:"scheme"`
}

// withDefaults fills the default scheme.
func (s SigningSettings) withDefaults() SigningSettings {
	if s.Scheme == "" {
		s.Scheme = SigningSchemes[0]
	}
	return s
}

// validate checks the scheme; field is the settings' path to it.
func (s SigningSettings) validate(field string) error {
	if s.Scheme != "" && !slices.Contains(SigningSchemes, s.Scheme) {
		return &FieldError{Field: field + ".scheme",
			Problem: fmt.Sprintf("%q: allowed are %s", s.Scheme, strings.Join(SigningSchemes, ", "))}
	}
	return nil
}

// AlertSettings choose how the alert webhook's requests are signed; the
// webhook's URL is the server's --alert-webhook.
type AlertSettings struct {
	Signing SigningSettings `json:"signing"`
}
