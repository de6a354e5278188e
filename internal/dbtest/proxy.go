package dbtest

import (
	"bytes"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Proxy is a TCP proxy in front of the test database server, for tests of
// what happens while the database is away: Cut drops every connection
// through it and refuses new ones until Restore. The server itself, which
// the package's parallel tests share, never stops.
type Proxy struct {
	ln      net.Listener
	network string // of the server: "tcp", or "unix" for a socket directory
	target  string
	cfg     *pgxpool.Config

	mu  sync.Mutex
	cut bool
	// loseCommit drops the connection that carries the next answer to a
	// COMMIT, instead of that answer (LoseNextCommit).
	loseCommit bool
	// loseAnswerTo, when set, drops the connection that carries the next
	// request with these bytes, in place of its answer (LoseAnswerTo).
	loseAnswerTo []byte
	conns        map[net.Conn]struct{}
	refused      int
	done         sync.WaitGroup
}

// NewProxy starts a proxy to the server of db on a port of 127.0.0.1 that
// the system picks; it is closed when the test ends. Pool connects through
// it to db's database.
func NewProxy(t testing.TB, db *pgxpool.Pool) *Proxy {
	t.Helper()
	cfg := db.Config()
	host, port := cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))
	p := &Proxy{network: "tcp", target: net.JoinHostPort(host, port), cfg: cfg, conns: map[net.Conn]struct{}{}}
	if strings.HasPrefix(host, "/") {
		p.network, p.target = "unix", filepath.Join(host, ".s.PGSQL."+port)
	}
	var err error
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatalf("dbtest: proxy: %v", err)
	}
	p.done.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Pool returns a pool on the database of the proxy's db, prepared as db is,
// whose connections all go through the proxy; it is closed when the test
// ends.
func (p *Proxy) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg := p.cfg.Copy()
	addr := p.ln.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = addr.IP.String(), uint16(addr.Port)
	cfg.ConnConfig.Fallbacks = nil
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("dbtest: proxy pool: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

// URL is a URL of the proxy's database through the proxy, for a client
// that makes its own pool.
func (p *Proxy) URL() string {
	addr := p.ln.Addr().(*net.TCPAddr)
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(addr.IP.String(), strconv.Itoa(addr.Port)),
		Path: "/" + p.cfg.ConnConfig.Database}
	if p.cfg.ConnConfig.Password != "" {
		u.User = url.UserPassword(p.cfg.ConnConfig.User, p.cfg.ConnConfig.Password)
	} else {
		u.User = url.User(p.cfg.ConnConfig.User)
	}
	return u.String()
}

// Cut drops every connection through the proxy and refuses new ones (they
// are reset as soon as they are accepted) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// LoseNextCommit makes the proxy lose the answer to the next COMMIT that
// passes through it: the connection that carries it is dropped in its
// place, so the client sees its connection lost after its transaction
// committed, as when a primary fails over between its commit and its
// answer.
func (p *Proxy) LoseNextCommit() {
	p.mu.Lock()
	p.loseCommit = true
	p.mu.Unlock()
}

// LoseAnswerTo makes the proxy lose the answer to the next request that
// passes through it carrying marker (a parameter's bytes, say): the
// connection that carries it is dropped in place of the answer's end (its
// ReadyForQuery), so the client sees its connection lost after the server
// has done all the request asked, an implicit transaction committed, as
// when a primary fails over between its commit and its answer.
func (p *Proxy) LoseAnswerTo(marker []byte) {
	p.mu.Lock()
	p.loseAnswerTo = slices.Clone(marker)
	p.mu.Unlock()
}

// readyForQuery is the start of the server's ReadyForQuery message, which
// ends the answer to a request.
var readyForQuery = []byte("Z\x00\x00\x00\x05")

// commitComplete is the server's CommandComplete message of a COMMIT.
var commitComplete = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

// loses reports whether the answer in chunk, which follows tail, is the
// COMMIT's answer to lose, and so the connection to drop.
func (p *Proxy) loses(tail, chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loseCommit || !bytes.Contains(append(slices.Clone(tail), chunk...), commitComplete) {
		return false
	}
	p.loseCommit = false
	return true
}

// request copies the client's requests to server, until either side
// ends, and sets lose once one carries the marker of LoseAnswerTo.
func (p *Proxy) request(server, client net.Conn, lose *atomic.Bool) {
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			if m := p.loseAnswerTo; m != nil && bytes.Contains(append(tail, chunk...), m) {
				p.loseAnswerTo = nil
				lose.Store(true)
			}
			keep := len(p.loseAnswerTo)
			p.mu.Unlock()
			if _, werr := server.Write(chunk); werr != nil {
				return
			}
			tail = append(tail, chunk...)
			tail = tail[max(0, len(tail)-keep):]
		}
		if err != nil {
			return
		}
	}
}

// answer copies the server's answers to client, until either side ends or
// an answer is to be lost (loses, or lose set by request). A COMMIT's
// answer split across two reads is lost too: its first part was sent, but
// never the whole.
func (p *Proxy) answer(client, server net.Conn, lose *atomic.Bool) {
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := server.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if p.loses(tail, chunk) || lose.Load() && bytes.Contains(append(slices.Clone(tail), chunk...), readyForQuery) {
				return
			}
			if _, werr := client.Write(chunk); werr != nil {
				return
			}
			keep := len(commitComplete) - 1 // the longer of the two
			tail = append(tail, chunk[max(0, n-keep):]...)
			tail = tail[max(0, len(tail)-keep):]
		}
		if err != nil {
			return
		}
	}
}

// Refused counts the connections refused while cut: a test can wait for a
// client to have tried again.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *Proxy) accept() {
	defer p.done.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cut {
			p.refused++
			p.mu.Unlock()
			// A reset, not an orderly close: as near a refusal as a
			// listening port gets.
			_ = client.(*net.TCPConn).SetLinger(0)
			client.Close()
			continue
		}
		p.conns[client] = struct{}{}
		p.done.Add(1)
		p.mu.Unlock()
		go p.serve(client)
	}
}

// serve copies both ways between client and a new connection to the
// server until either side ends or Cut closes the client.
func (p *Proxy) serve(client net.Conn) {
	defer p.done.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, client)
		p.mu.Unlock()
		client.Close()
	}()
	server, err := net.Dial(p.network, p.target)
	if err != nil {
		return
	}
	defer server.Close()
	copied := make(chan struct{}, 2)
	var lose atomic.Bool
	go func() {
		p.request(server, client, &lose)
		copied <- struct{}{}
	}()
	go func() {
		p.answer(client, server, &lose)
		copied <- struct{}{}
	}()
	<-copied
	// One side ended: close both, so the other copy ends too.
	client.Close()
	server.Close()
	<-copied
}

// close stops the proxy and drops its connections.
func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.done.Wait()
}
