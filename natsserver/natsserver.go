// Package natsserver runs the NATS server a Waybill process embeds when it is
// given no NATS URL: in-process, with no port opened unless asked for, so
// wake-ups, alerts and configuration news travel inside the process.
package natsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
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

// Server is an embedded NATS server, a service.Service: Start runs it,
// Stop shuts it down.
type Server struct {
	cfg Config

	mu               sync.Mutex
	srv              *server.Server
	started, stopped bool
}

// New returns a server for cfg that has not started.
func New(cfg Config) *Server { return &Server{cfg: cfg} }

// startTimeout bounds the wait for the server to take connections.
const startTimeout = 10 * time.Second

// Start runs the server and waits, while ctx lasts, until it takes
// connections. It fails after a Start or a Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("nats server: Start after Start or Stop")
	}
	s.started = true
	opts := &server.Options{DontListen: true, NoSigs: true, NoLog: true, ServerName: "waybill"}
	if s.cfg.Listen != "" {
		host, port, err := net.SplitHostPort(s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("nats listen address %q: %w", s.cfg.Listen, err)
		}
		opts.DontListen = false
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return fmt.Errorf("nats listen address %q: port: %w", s.cfg.Listen, err)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("start nats server: %w", err)
	}
	// The server reports a listener it could not open (a port in use, an
	// address not on this machine) only in its log, and ReadyForConnections
	// would wait out its whole timeout for it: catch it there instead.
	fatal := make(chan error, 1)
	srv.SetLogger(fatalLog(fatal), false, false)
	go srv.Start()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for !srv.ReadyForConnections(readyPoll) {
		select {
		case err := <-fatal:
			srv.Shutdown()
			if s.cfg.Listen != "" {
				return fmt.Errorf("nats listen address %q: %w", s.cfg.Listen, err)
			}
			return fmt.Errorf("start nats server: %w", err)
		case <-ctx.Done():
			srv.Shutdown()
			return fmt.Errorf("start nats server: not ready: %w", ctx.Err())
		default:
		}
	}
	s.srv = srv
	return nil
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

// Connect opens a client connection inside the process, to a started
// server.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, nats.InProcessServer(s.srv))
	nc, err := nats.Connect(s.srv.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats: %w", err)
	}
	return nc, nil
}

// ClientURL is the URL outside clients use when Listen was set, once
// started.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// Stop shuts the server down and waits for it while ctx lasts. It is safe
// to call twice, and before or without Start.
func (s *Server) Stop(ctx context.Context) {
	s.mu.Lock()
	srv := s.srv
	if s.stopped {
		srv = nil
	}
	s.stopped = true
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Shutdown()
	done := make(chan struct{})
	go func() {
		srv.WaitForShutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
