package lifecycle

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// CallbackSettings bound where the messages' outcome callbacks, whose URLs
// the senders choose, may go. Loopback, private, link-local, shared and
// the other special addresses are refused unless AllowedNetworks lists
// them; AllowedHosts, when not empty, narrows the callbacks to those hosts.
type CallbackSettings struct {
	// AllowedNetworks are CIDRs (10.0.0.0/8, fd00::/8) whose special
	// addresses callbacks may reach all the same. Default none.
	AllowedNetworks []string `json:"allowed_networks"`
	// AllowedHosts are the only hosts callbacks may name, when there are
	// some: host names, IP addresses, or *.example.com for every name
	// under example.com. Default none: any host.
	AllowedHosts []string `json:"allowed_hosts"`
	// Signing is how the callbacks are signed.
	Signing SigningSettings `json:"signing"`
}

// MaxCallbackListLength bounds each list of CallbackSettings.
const MaxCallbackListLength = 100

// Networks are the AllowedNetworks parsed; those that do not parse
// (Validate refuses them) are left out.
func (c CallbackSettings) Networks() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range c.AllowedNetworks {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks both lists: each network a CIDR written with its host
// bits zero, each host a host name, an IP address or a *. pattern.
func (c CallbackSettings) Validate() error {
	var errs []error
	if len(c.AllowedNetworks) > MaxCallbackListLength {
		errs = append(errs, &FieldError{Field: "callbacks.allowed_networks",
			Problem: fmt.Sprintf("lists %d networks, at most %d allowed", len(c.AllowedNetworks), MaxCallbackListLength)})
	}
	for _, s := range c.AllowedNetworks {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			errs = append(errs, &FieldError{Field: "callbacks.allowed_networks",
				Problem: fmt.Sprintf("%q is not a CIDR such as 10.0.0.0/8 or fd00::/8", s)})
		case p != p.Masked():
			errs = append(errs, &FieldError{Field: "callbacks.allowed_networks",
				Problem: fmt.Sprintf("%q has host bits set: write %s", s, p.Masked())})
		}
	}
	if len(c.AllowedHosts) > MaxCallbackListLength {
		errs = append(errs, &FieldError{Field: "callbacks.allowed_hosts",
			Problem: fmt.Sprintf("lists %d hosts, at most %d allowed", len(c.AllowedHosts), MaxCallbackListLength)})
	}
	for _, h := range c.AllowedHosts {
		if !isHostPattern(h) {
			errs = append(errs, &FieldError{Field: "callbacks.allowed_hosts",
				Problem: fmt.Sprintf("%q is not a host name, an IP address or a pattern such as *.example.com", h)})
		}
	}
	return errors.Join(append(errs, c.Signing.validate("callbacks.signing"))...)
}

// isHostPattern accepts an IP address, a host name (labels of letters,
// digits and '-', dot-separated, 253 bytes at most), or "*." and a name
// of two labels or more.
func isHostPattern(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	name, pattern := strings.CutPrefix(h, "*.")
	if name == "" || len(name) > 253 || (pattern && !strings.Contains(name, ".")) {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
