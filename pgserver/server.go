package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	// ErrNoBinaries means no directory with the PostgreSQL server binaries
	// (postgres and initdb) was found, or Config.BinDir lacks them.
	ErrNoBinaries = errors.New("no PostgreSQL server binaries (postgres, initdb) found")

	// errExited means the server process went away while we waited for it.
	errExited = errors.New("postgres exited")

	// errPortInUse means the server could not bind its port, which
	// another process took after we picked it.
	errPortInUse = errors.New("port in use")
)

const (
	// readyTimeout bounds the wait for a server to accept connections.
	readyTimeout = 30 * time.Second

	// portAttempts is how many free ports Start tries when Config.Port is
	// 0, since a port we found free can be taken before postgres binds it.
	portAttempts = 4

	// quitTimeout is how long Stop waits after SIGQUIT before SIGKILL.
	quitTimeout = 10 * time.Second
)

// reservedSettings are the settings Start sets itself: URL depends on them.
var reservedSettings = []string{"port", "listen_addresses", "unix_socket_directories"}

// Config says where and how to run the server.
type Config struct {
	// DataDir is the server's data directory. It is required, and is
	// created and initialized when missing or empty.
	DataDir string

	// BinDir holds the postgres and initdb binaries. When empty,
	// FindBinDir finds it.
	BinDir string

	// Port is the TCP port on 127.0.0.1 to listen on. When 0, Start picks
	// a free one.
	Port int

	// Settings are extra server settings, passed as -c name=value; tests
	// pass fsync=off and the like. They cannot set port,
	// listen_addresses or unix_socket_directories.
	Settings map[string]string

	// Logger receives the server's lifecycle events. When nil,
	// slog.Default() is used.
	Logger *slog.Logger
}

// Server is a PostgreSQL server on a data directory, a service.Service:
// Start starts it, or adopts one already running there, and Stop stops
// it, unless it was adopted.
type Server struct {
	cfg Config

	// mu is held through Start, so a Stop waits for a start under way.
	mu               sync.Mutex
	inst             *instance
	started, stopped bool
}

// New returns a server for cfg that has not started.
func New(cfg Config) *Server { return &Server{cfg: cfg} }

// instance is a running server, either launched or adopted.
type instance struct {
	dataDir  string
	port     int
	password string
	pid      int
	logger   *slog.Logger

	// proc and exited are set for a server we started: exited is closed
	// once proc has been waited for, with its result in exitErr. An
	// adopted server is not our child, so we follow it through its PID
	// and postmaster.pid instead.
	proc    *os.Process
	exited  chan struct{}
	exitErr error

	// watching is set while an exit would be unexpected, so only those are
	// logged.
	watching atomic.Bool
}

// Start starts a PostgreSQL server on the data directory and waits until
// it accepts connections. When a server from an earlier process is still
// running on the data directory, Start adopts it instead; it keeps the port
// and settings it was started with, and Stop leaves it running. The server
// keeps running after ctx ends; ctx bounds only the start. Start fails
// after a Start or a Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("postgres: Start after Start or Stop")
	}
	s.started = true
	inst, err := startOrAdopt(ctx, s.cfg)
	if err != nil {
		return err
	}
	s.inst = inst
	return nil
}

// startOrAdopt starts or adopts the server of cfg.
func startOrAdopt(ctx context.Context, cfg Config) (*instance, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start postgres: Config.DataDir is empty")
	}
	for name := range cfg.Settings {
		if slices.Contains(reservedSettings, strings.ToLower(name)) {
			return nil, fmt.Errorf("start postgres: setting %q is managed by pgserver", name)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: resolve data dir: %w", err)
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	} else if !hasBinaries(binDir) {
		return nil, fmt.Errorf("start postgres: check bin dir %s: %w", binDir, ErrNoBinaries)
	}
	r, err := lookupRunAs()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}

	password, err := prepareDataDir(ctx, binDir, dataDir, r)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}

	s, err := adopt(ctx, dataDir, password, logger)
	if err != nil || s != nil {
		return s, err
	}

	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, fmt.Errorf("start postgres: %w", err)
			}
		}
		s, err := launch(ctx, binDir, dataDir, port, password, cfg.Settings, r, logger)
		if errors.Is(err, errPortInUse) && cfg.Port == 0 && attempt < portAttempts {
			logger.Debug("postgres port taken, retrying with another", "port", port)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
		return s, nil
	}
}

// adopt returns a Server for a postgres that an earlier process left
// running on dataDir, or nil when there is none and a new one should start.
func adopt(ctx context.Context, dataDir, password string, logger *slog.Logger) (*instance, error) {
	pf, err := readPIDFile(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		// A half-written or foreign lock file: postgres itself decides
		// whether it is stale and says so in its log if not.
		logger.Debug("ignoring unreadable postmaster.pid", "data_dir", dataDir, "err", err)
		return nil, nil
	}
	// In a fresh container a stale PID can be our own.
	if pf.pid == os.Getpid() {
		return nil, nil
	}
	s := &instance{dataDir: dataDir, port: pf.port, password: password, pid: pf.pid, logger: logger}
	if !s.running() {
		return nil, nil
	}
	// Wait rather than try once: the server may still be starting, or be
	// shutting down because its parent died, after which we start anew.
	err = s.waitReady(ctx)
	if errors.Is(err, errExited) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("adopt postgres (pid %d, port %d) running on %s: %w", pf.pid, pf.port, dataDir, err)
	}
	logger.Info("adopted running postgres", "data_dir", dataDir, "pid", s.pid, "port", s.port)
	return s, nil
}

// launch runs postgres on dataDir and port and waits until it is ready.
func launch(ctx context.Context, binDir, dataDir string, port int, password string, settings map[string]string, r *runAs, logger *slog.Logger) (*instance, error) {
	// Keep the previous run's log, but only one, so the file stays small
	// and its tail is this run's.
	logPath := filepath.Join(dataDir, logFileName)
	if err := os.Rename(logPath, logPath+".prev"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("rotate server log: %w", err)
	}
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	defer logFile.Close()
	if err := r.chown(logPath); err != nil {
		return nil, err
	}

	args := []string{"-D", dataDir}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", name+"="+settings[name])
	}
	args = append(args,
		"-c", "port="+strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		// No Unix socket: its path is limited to 107 bytes, which deep
		// data directories exceed, and we only connect over TCP.
		"-c", "unix_socket_directories=",
	)
	// Not CommandContext: the server must outlive ctx, which bounds only
	// the start.
	cmd := exec.Command(filepath.Join(binDir, "postgres"), args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = "/"
	cmd.SysProcAttr = r.sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run postgres: %w", err)
	}

	s := &instance{
		dataDir:  dataDir,
		port:     port,
		password: password,
		pid:      cmd.Process.Pid,
		logger:   logger,
		proc:     cmd.Process,
		exited:   make(chan struct{}),
	}
	go func() {
		s.exitErr = cmd.Wait()
		if s.watching.Load() {
			logger.Warn("postgres exited unexpectedly", "data_dir", dataDir, "pid", s.pid, "err", s.exitErr, "log", logPath)
		}
		close(s.exited)
	}()

	if err := s.waitReady(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		if serr := s.stop(stopCtx); serr != nil {
			logger.Warn("stop postgres that failed to start", "err", serr)
		}
		tail := logTail(logPath)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, fmt.Errorf("wait for postgres on port %d: %w; last lines of %s:\n%s", port, err, logPath, tail)
	}
	s.watching.Store(true)
	logger.Info("started postgres", "data_dir", dataDir, "pid", s.pid, "port", port)
	return s, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Adopted reports whether Start found the server already running on the
// data directory rather than starting it. Stop leaves an adopted server
// running: another process started it and may be using it.
func (s *Server) Adopted() bool { return s.inst.adopted() }

func (s *instance) adopted() bool { return s.proc == nil }

// URL returns a postgres URL for database on the started server at
// 127.0.0.1, with the superuser's credentials and sslmode=disable, as the
// server has no TLS.
func (s *Server) URL(database string) string { return s.inst.URL(database) }

// URL is Server.URL.
func (s *instance) URL(database string) string {
	return s.url(database, url.UserPassword(superuser, s.password))
}

// Stop shuts down a server that Start started with a fast shutdown
// (SIGINT), which aborts open transactions, and waits for it to exit. When
// it has not exited by ctx's end, Stop sends SIGQUIT, and SIGKILL if even
// that does not work, and logs the failure. An adopted server is left
// running: a process never stops a server it did not start. It is safe to
// call twice, and before or without Start.
func (s *Server) Stop(ctx context.Context) {
	s.mu.Lock()
	inst := s.inst
	if s.stopped {
		inst = nil
	}
	s.stopped = true
	s.mu.Unlock()
	if inst == nil {
		return
	}
	if err := inst.stop(ctx); err != nil {
		inst.logger.Error("stop postgres", "data_dir", inst.dataDir, "pid", inst.pid, "err", err)
	}
}

// stop is Stop's work, reporting what went wrong.
func (s *instance) stop(ctx context.Context) error {
	s.watching.Store(false)
	if s.adopted() {
		s.logger.Info("left running postgres it did not start", "data_dir", s.dataDir, "pid", s.pid)
		return nil
	}

	if err := s.signal(syscall.SIGINT); err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	if s.wait(ctx) {
		s.logger.Info("stopped postgres", "data_dir", s.dataDir, "pid", s.pid)
		return nil
	}

	s.logger.Warn("postgres did not stop in time, sending SIGQUIT", "data_dir", s.dataDir, "pid", s.pid)
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGKILL} {
		if err := s.signal(sig); err != nil {
			return fmt.Errorf("stop postgres: %w", err)
		}
		waitCtx, cancel := context.WithTimeout(context.Background(), quitTimeout)
		exited := s.wait(waitCtx)
		cancel()
		if exited {
			return fmt.Errorf("stop postgres: fast shutdown: %w; sent %v", ctx.Err(), sig)
		}
	}
	return fmt.Errorf("stop postgres: pid %d still running after SIGKILL", s.pid)
}

// signal sends sig to the server we started, treating a server that is
// already gone as success. It goes through os.Process, which cannot hit a
// reused PID.
func (s *instance) signal(sig syscall.Signal) error {
	err := s.proc.Signal(sig)
	if err == nil || errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return fmt.Errorf("signal pid %d: %w", s.pid, err)
}

// running reports whether the server process is still there.
func (s *instance) running() bool {
	if s.exited != nil {
		select {
		case <-s.exited:
			return false
		default:
			return true
		}
	}
	// The postmaster removes its lock file as it exits; checking it too
	// keeps a reused PID from looking like our server.
	pf, err := readPIDFile(s.dataDir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && pf.pid != s.pid) {
		return false
	}
	return processAlive(s.pid)
}

// wait waits until the server has exited, reporting false when ctx ends
// first.
func (s *instance) wait(ctx context.Context) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s.running() {
		select {
		case <-ctx.Done():
			return false
		case <-s.exited:
		case <-tick.C:
		}
	}
	return true
}

// waitReady polls the server with connections until one succeeds, the
// server exits (errExited), or ctx or readyTimeout ends.
func (s *instance) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if s.exited != nil {
		// Abort a connection attempt when the server dies: whatever else
		// holds the port may accept and never answer.
		go func() {
			select {
			case <-s.exited:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		connCtx, connCancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(connCtx, s.URL("postgres"))
		connCancel()
		if err == nil {
			return conn.Close(ctx)
		}
		if !s.running() {
			if s.exitErr != nil {
				return fmt.Errorf("%w: %w", errExited, s.exitErr)
			}
			return errExited
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last connection error: %w)", ctx.Err(), err)
		case <-s.exited:
		case <-tick.C:
		}
	}
}
