package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestServeSecurityFlags: --trusted-proxies takes CIDRs and addresses,
// from the flag or its variable, and names what it refuses;
// --secure-cookies and --metrics-listen have their variables too.
func TestServeSecurityFlags(t *testing.T) {
	parse := func(args ...string) (*serveConfig, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg := serveFlags(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return cfg, applyEnv(fs)
	}
	cfg, err := parse("--trusted-proxies", "10.0.0.0/8, 192.168.1.7,fd00::1/8", "--secure-cookies")
	if err != nil || cfg.trustedProxies.String() != "10.0.0.0/8,192.168.1.7/32,fd00::/8" || !cfg.secureCookies || cfg.metricsListen != "" {
		t.Errorf("parsed %q, %t, %q: %v", cfg.trustedProxies.String(), cfg.secureCookies, cfg.metricsListen, err)
	}
	if _, err := parse("--trusted-proxies", "10.0.0.0/8,proxy.internal"); err == nil || !strings.Contains(err.Error(), `"proxy.internal" is neither a CIDR`) {
		t.Errorf("a host name: %v", err)
	}
	t.Setenv("WAYBILL_TRUSTED_PROXIES", "127.0.0.1")
	t.Setenv("WAYBILL_SECURE_COOKIES", "true")
	t.Setenv("WAYBILL_METRICS_LISTEN", "127.0.0.1:9464")
	cfg, err = parse()
	if err != nil || cfg.trustedProxies.String() != "127.0.0.1/32" || !cfg.secureCookies || cfg.metricsListen != "127.0.0.1:9464" {
		t.Errorf("from the environment %q, %t, %q: %v", cfg.trustedProxies.String(), cfg.secureCookies, cfg.metricsListen, err)
	}
	t.Setenv("WAYBILL_TRUSTED_PROXIES", "10.0.0.0/33")
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), "WAYBILL_TRUSTED_PROXIES") {
		t.Errorf("a bad variable: %v", err)
	}
}
