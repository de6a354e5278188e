package netguard

import (
	"errors"
	"net/netip"
	"testing"
)

// TestRange classifies addresses without sending anything anywhere.
func TestRange(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"fd00::1", "private"},
		{"fc00::1", "private"},
		{"::ffff:10.0.0.1", "private"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"100.64.0.1", "shared (carrier-grade NAT)"},
		{"100.127.255.255", "shared (carrier-grade NAT)"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", `"this network"`},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.0.170", "protocol assignment"},
		{"198.18.0.1", "benchmarking"},
		{"fec0::1", "site-local"},
		{"::10.0.0.1", "IPv4-compatible"},
		{"64:ff9b::7f00:1", "loopback (embedded in 64:ff9b::/96)"},
		{"64:ff9b::a9fe:a9fe", "link-local (embedded in 64:ff9b::/96)"},
		{"64:ff9b:1::1", "local NAT64"},
		{"2002:c0a8:101::1", "private (embedded in 2002::/16)"},
		// A zone hides nothing.
		{"64:ff9b::a9fe:a9fe%1", "link-local (embedded in 64:ff9b::/96)"},
		{"64:ff9b::a00:5%eth0", "private (embedded in 64:ff9b::/96)"},
		{"2002:c0a8:101::1%1", "private (embedded in 2002::/16)"},
		{"64:ff9b:1::1%1", "local NAT64"},
		{"fec0::1%1", "site-local"},
		// The public internet.
		{"93.184.215.14", ""},
		{"8.8.8.8", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.32.0.1", ""},
		{"169.253.0.1", ""},
		{"2606:4700::6810:84e5", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::1", ""},
	} {
		if got := Range(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestPolicy: an allowed network lets its special addresses through, a
// mapped address included; hosts narrow by name and pattern; localhost
// is loopback by its name.
func TestPolicy(t *testing.T) {
	loopback := Policy{Networks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16")}}
	hosts := Policy{Hosts: []string{"hooks.example.org", "*.example.com", "203.0.113.7"}}
	for _, tc := range []struct {
		name   string
		policy Policy
		host   string
		want   error
	}{
		{"public name", Policy{}, "erp.example", nil},
		{"public address", Policy{}, "93.184.215.14", nil},
		{"loopback", Policy{}, "127.0.0.1", ErrAddress},
		{"IPv6 loopback", Policy{}, "::1", ErrAddress},
		{"mapped loopback", Policy{}, "::ffff:127.0.0.1", ErrAddress},
		{"metadata", Policy{}, "169.254.169.254", ErrAddress},
		{"localhost", Policy{}, "localhost", ErrAddress},
		{"localhost in capitals, rooted", Policy{}, "LocalHost.", ErrAddress},
		{"under localhost", Policy{}, "app.localhost", ErrAddress},
		{"allowed loopback", loopback, "127.0.0.1", nil},
		{"allowed mapped", loopback, "::ffff:127.0.0.2", nil},
		{"allowed localhost", loopback, "localhost", nil},
		{"allowed private", loopback, "10.1.2.3", nil},
		{"other private", loopback, "10.2.0.1", ErrAddress},
		{"IPv6 loopback not listed", loopback, "::1", ErrAddress},
		{"NAT64 with a zone", Policy{}, "64:ff9b::a9fe:a9fe%1", ErrAddress},
		{"allowed, with a zone", Policy{Networks: []netip.Prefix{netip.MustParsePrefix("fe80::/10")}}, "fe80::1%eth0", nil},
		{"listed host", hosts, "hooks.example.org", nil},
		{"listed host in capitals", hosts, "Hooks.Example.Org.", nil},
		{"under a pattern", hosts, "a.b.example.com", nil},
		{"the pattern's own domain", hosts, "example.com", ErrHost},
		{"a look-alike", hosts, "evilexample.com", ErrHost},
		{"unlisted", hosts, "erp.example", ErrHost},
		{"listed address", hosts, "203.0.113.7", nil},
		{"unlisted loopback", hosts, "127.0.0.1", ErrHost},
	} {
		if err := tc.policy.CheckHost(tc.host); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: CheckHost(%q) = %v, want %v", tc.name, tc.host, err, tc.want)
		}
	}
}

// TestControl: the dial hook refuses a refused address with its
// *AddressError, as a dial would meet it after resolving a name.
func TestControl(t *testing.T) {
	var policy Policy
	control := func(network, address string) error { return policy.Control(network, address, nil) }
	err := control("tcp4", "127.0.0.1:8080")
	var ae *AddressError
	if !errors.As(err, &ae) || ae.Range != "loopback" || ae.Addr.String() != "127.0.0.1" {
		t.Fatalf("loopback: %v", err)
	}
	if err := control("tcp6", "[::ffff:169.254.169.254]:80"); !errors.Is(err, ErrAddress) {
		t.Errorf("mapped metadata: %v", err)
	}
	if err := control("tcp4", "93.184.215.14:443"); err != nil {
		t.Errorf("public: %v", err)
	}
	policy.Networks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if err := control("tcp4", "127.0.0.1:8080"); err != nil {
		t.Errorf("allowed since: %v", err)
	}
}
