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
	// The server reports a listener it could not open (a port in use, an
	// address not on this machine) only in its log, and ReadyForConnections
	// would wait out its whole timeout for it: catch it there instead.
	fatal := make(chan error, 1)
	srv.SetLogger(fatalLog(fatal), false, false)
	go srv.Start()
	deadline := time.Now().Add(startTimeout)
	for !srv.ReadyForConnections(readyPoll) {
		select {
		case err := <-fatal:
			srv.Shutdown()
			if cfg.Listen != "" {
				return nil, fmt.Errorf("nats listen address %q: %w", cfg.Listen, err)
			}
			return nil, fmt.Errorf("start nats server: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			return nil, errors.New("start nats server: not ready after 10s")
		}
	}
	return &Server{srv: srv}, nil
}

// readyPoll is how long one readiness check waits before the log is looked at.
const readyPoll = 50 * time.Millisecond

// fatalLog is the server's logger: it drops everything but a fatal error,
// which it hands to Start. The server's own logger would exit the process.
type fatalLog chan<- error

func (l fatalLog) Fatalf(format string, v ...any) {
	select {
	case l <- fmt.Errorf(format, v...):
	default: // Start has one already.
	}
}

func (fatalLog) Noticef(string, ...any) {}
func (fatalLog) Warnf(string, ...any)   {}
func (fatalLog) Errorf(string, ...any)  {}
func (fatalLog) Debugf(string, ...any)  {}
func (fatalLog) Tracef(string, ...any)  {}

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
