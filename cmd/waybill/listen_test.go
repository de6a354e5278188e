package main

import "net"

// freeListenAddr returns a loopback address with a port free just now.
func freeListenAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
