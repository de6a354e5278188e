package main

import (
	"net"
	"testing"
)

// freeAddrs returns n distinct loopback addresses with ports free just
// now. It holds each port until it has them all: a port closed at once
// may be the next one handed out, and two processes of a test given the
// same port fail to start.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// freeAddr returns a loopback address with a port free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrs(t, 1)[0]
}
