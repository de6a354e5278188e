package main

import (
	"flag"
	"io"
	"path/filepath"
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

// TestServeNamesTheFlagOfABadValue: a bad --max-payload or a missing
// --secrets-key-file stops the start, named, before any database starts.
func TestServeNamesTheFlagOfABadValue(t *testing.T) {
	t.Parallel()
	err := serve(t.Context(), &serveConfig{maxPayload: -1, logFormat: "text"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--max-payload: -1") {
		t.Errorf("--max-payload -1: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no.key")
	err = serve(t.Context(), &serveConfig{dataDir: t.TempDir(), listen: "127.0.0.1:0", logFormat: "text",
		secretsKeyFile: missing}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--secrets-key-file: ") || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing --secrets-key-file: %v", err)
	}
}
