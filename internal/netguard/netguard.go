// Package netguard decides which addresses the outbound requests whose
// address a non-admin chose (the messages' callbacks) may reach: none in
// the special ranges (loopback, private, link-local, shared, unspecified,
// multicast and the other reserved ones) unless a Policy allows its
// network, and, when a Policy lists hosts, only those.
package netguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// The refusals callers branch on.
var (
	// ErrAddress: the address is in a special range no allowed network
	// covers; an *AddressError says which.
	ErrAddress = errors.New("address not allowed")
	// ErrHost: the host is not among the allowed hosts.
	ErrHost = errors.New("host not allowed")
)

// AddressError is ErrAddress for one address.
type AddressError struct {
	Addr netip.Addr
	// Range names the special range: loopback, private, …
	Range string
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("%s is a %s address", e.Addr, e.Range)
}

func (e *AddressError) Unwrap() error { return ErrAddress }

// special are the ranges refused unless allowed, beside those netip
// classifies itself (loopback, private, link-local, multicast,
// unspecified), most specific first.
var special = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
}

// embedded are the IPv6 ranges that carry an IPv4 address, which is
// judged in their place: NAT64 (RFC 6052) at the end, 6to4 after the
// first two bytes.
var embedded = []struct {
	prefix netip.Prefix
	at     int
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12},
	{netip.MustParsePrefix("2002::/16"), 2},
}

// Range names the special range a is in; "" for an address of the public
// internet. An IPv4 address mapped into IPv6, or carried by NAT64 or 6to4,
// is in the range of the IPv4 address. The zone is no part of the range,
// and netip.Prefix.Contains holds for no zoned address.
func Range(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		for _, e := range embedded {
			if e.prefix.Contains(a) {
				b := a.As16()
				if r := Range(netip.AddrFrom4([4]byte(b[e.at : e.at+4]))); r != "" {
					return r + " (embedded in " + e.prefix.String() + ")"
				}
				return ""
			}
		}
	}
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	}
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.name
		}
	}
	return ""
}

// Policy is what the requests may reach.
type Policy struct {
	// Networks are the special ranges allowed all the same.
	Networks []netip.Prefix
	// Hosts, when not empty, are the only hosts allowed: host names, IP
	// addresses, and patterns *.example.com, which cover every name
	// under example.com but not example.com itself.
	Hosts []string
}

// CheckAddr refuses an address in a special range that none of the
// Networks covers: an *AddressError.
func (p Policy) CheckAddr(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	r := Range(a)
	if r == "" {
		return nil
	}
	for _, n := range p.Networks {
		if n.Contains(a) {
			return nil
		}
	}
	return &AddressError{Addr: a, Range: r}
}

// AllowsHost refuses a host (as url.URL.Hostname gives it) outside the
// Hosts when there are some: ErrHost.
func (p Policy) AllowsHost(host string) error {
	if len(p.Hosts) > 0 && !p.allowsHost(strings.TrimSuffix(strings.ToLower(host), ".")) {
		return fmt.Errorf("%w: %s", ErrHost, host)
	}
	return nil
}

// CheckHost is AllowsHost, and refuses a host that is literally an
// address CheckAddr refuses, or localhost (an *AddressError): what can be
// told before any name is resolved. A name is otherwise judged when it
// is dialed (Control).
func (p Policy) CheckHost(host string) error {
	if err := p.AllowsHost(host); err != nil {
		return err
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(name); err == nil {
		return p.CheckAddr(a)
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return p.CheckAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	}
	return nil
}

func (p Policy) allowsHost(name string) bool {
	for _, h := range p.Hosts {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
				return true
			}
		} else if name == h {
			return true
		}
	}
	return false
}

// Control is a net.Dialer's Control hook: it refuses, once the name is
// resolved, every address CheckAddr refuses, so the dial fails with the
// *AddressError before anything is sent.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s is not an address and port", ErrAddress, address)
	}
	return p.CheckAddr(ap.Addr())
}
