// Package natsserver runs the NATS server a Waybill process embeds when it is
// given no NATS URL: in-process, with no port opened unless asked for, so
// wake-ups, alerts and configuration news travel inside the process.
package natsserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures an embedded server.
type Config struct {
	// Listen, when set, is a host:port on which the server also takes
	// outside clients (port 0 picks a free one); empty opens no port.
	Listen string
}

// Server is a running embedded NATS server.
type Server struct {
	srv *server.Server
}

// startTimeout bounds the wait for the server to take connections.
const startTimeout = 10 * time.Second

// Start runs an embedded server and waits until it takes connections.
func Start(cfg Config) (*Server, error) {
	opts := &server.Options{DontListen: true, NoSigs: true, NoLog: true, ServerName: "waybill"}
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: %w", cfg.Listen, err)
		}
		opts.DontListen = false
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("nats listen address %q: port: %w", cfg.Listen, err)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(startTimeout) {
		srv.Shutdown()
		return nil, errors.New("start nats server: not ready after 10s")
	}
	return &Server{srv: srv}, nil
}

// Connect opens a client connection inside the process.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, nats.InProcessServer(s.srv))
	nc, err := nats.Connect(s.srv.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return nc, nil
}

// ClientURL is the URL outside clients use when Listen was set.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Stop shuts the server down and waits for it; safe to call twice.
func (s *Server) Stop() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}
