package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/console"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// stream is a live history opened as a browser opens it.
type stream struct {
	resp   *http.Response
	cancel context.CancelFunc
	// events receives the stream's events, as their lines.
	events chan string
}

// openStream opens the live history of the message, and reads its events
// on a goroutine of its own while it is 200.
func (c *client) openStream(t testing.TB, messageID string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(c.b.ctx)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/ui/messages/"+messageID+"/live?after=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	s := &stream{resp: resp, cancel: cancel, events: make(chan string, 64)}
	if resp.StatusCode != http.StatusOK {
		return s
	}
	go func() {
		defer close(s.events)
		var ev strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if sc.Text() == "" && ev.Len() > 0 {
				s.events <- ev.String()
				ev.Reset()
				continue
			}
			ev.WriteString(sc.Text() + "\n")
		}
	}()
	return s
}

// close ends the stream as a browser that leaves the page.
func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// setCaps sets the caps of the live histories.
func (b *bundle) setCaps(t testing.TB, total, perSession int) {
	t.Helper()
	s, err := b.w.Settings(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Console = lifecycle.ConsoleSettings{MaxStreams: total, MaxStreamsPerSession: perSession}
	if err := b.w.SetSettings(b.ctx, s, "operator:test"); err != nil {
		t.Fatal(err)
	}
}

// TestLiveHistoriesAreCapped: a stream over the session's cap, or over
// the process's, is refused with 429 and the reason, which the page's
// status shows; a stream closed frees its place.
func TestLiveHistoriesAreCapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	id := m.ID.String()
	b.setCaps(t, 2, 1)

	alice := b.signedIn(t, b.admin)
	first := alice.openStream(t, id)
	if first.resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", first.resp.StatusCode)
	}
	over := alice.openStream(t, id)
	body, _ := io.ReadAll(over.resp.Body)
	if over.resp.StatusCode != http.StatusTooManyRequests || over.resp.Header.Get("Retry-After") != "10" ||
		!strings.Contains(string(body), "Live updates paused: this session follows as many pages live as the setting "+
			"console.max_streams_per_session allows (1)") {
		t.Fatalf("second stream of a session: %d %v %q", over.resp.StatusCode, over.resp.Header, body)
	}
	alice.get(t, "/ui/messages/"+id+"/live/status").want(t, http.StatusOK).
		has(t, `id="live-status"`, "<strong>Live updates paused</strong>", "console.max_streams_per_session",
			`hx-get="/ui/messages/`+id+`/live/status"`, `sse-swap="status"`)

	// Another session has its own place, up to the process's cap.
	rita := b.signedIn(t, b.reader)
	if s := rita.openStream(t, id); s.resp.StatusCode != http.StatusOK {
		t.Fatalf("a stream of another session: %d", s.resp.StatusCode)
	}
	bob := b.signedIn(t, b.admin)
	over = bob.openStream(t, id)
	body, _ = io.ReadAll(over.resp.Body)
	if over.resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "console.max_streams allows (2)") {
		t.Fatalf("a stream over the process's cap: %d %q", over.resp.StatusCode, body)
	}
	bob.get(t, "/ui/messages/"+id+"/live/status").want(t, http.StatusOK).has(t, "console.max_streams allows (2)")

	// A page that closes frees its place.
	first.close()
	testpoll.Until(t, "a stream of the session is taken again", func() bool {
		s := alice.openStream(t, id)
		s.close()
		return s.resp.StatusCode == http.StatusOK
	})
	// The server frees the place of a stream its browser closed once it
	// sees the close, a moment later.
	testpoll.Until(t, "the status says the page's updates were interrupted, no longer paused", func() bool {
		a := alice.get(t, "/ui/messages/"+id+"/live/status").want(t, http.StatusOK)
		return strings.Contains(a.body, "Live updates interrupted") && !strings.Contains(a.body, "paused")
	})
}

// TestLiveHistoryIsPushed: an event reaches an open stream once it
// commits, whichever process's console serves the stream and whichever
// wrote the event, and the stream reads nothing while nothing happens.
func TestLiveHistoryIsPushed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	other := b.ingest(t, "other")
	// A second process's console, with its own tail.
	second := b.newConsole(t)
	t.Cleanup(func() { second.Stop(context.Background()) })
	srv := httptest.NewServer(second)
	t.Cleanup(srv.Close)
	c := b.clientOf(t, srv)
	c.signIn(t, b.admin).want(t, http.StatusSeeOther)

	s := c.openStream(t, m.ID.String())
	if s.resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", s.resp.StatusCode)
	}
	next := func(what string) string {
		t.Helper()
		select {
		case ev := <-s.events:
			return ev
		case <-time.After(testpoll.Timeout):
			t.Fatalf("no %s within %s", what, testpoll.Timeout)
		}
		return ""
	}
	next("retry")
	next("status")
	// What committed before the stream opened comes first.
	if ev := next("history so far"); !strings.Contains(ev, `id="event-1"`) || !strings.Contains(ev, `id="event-2"`) {
		t.Fatalf("the history so far: %q", ev)
	}
	next("state so far")
	// Another message moves: nothing is sent.
	b.settle(t, other.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
	// This one moves: its events come.
	if _, err := b.w.Skip(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	if ev := next("the skip"); !strings.Contains(ev, "delivery.skipped") || strings.Contains(ev, "400 Bad Request") {
		t.Fatalf("the event after the skip: %q", ev)
	}
	if ev := next("the state after the skip"); !strings.Contains(ev, "id: 3\n") {
		t.Fatalf("the state after the skip: %q", ev)
	}
	// Signed out, the browser is told nothing more: the stream ends at
	// the next move.
	c.get(t, "/ui/").want(t, http.StatusOK)
	c.post(t, "/ui/signout", nil).redirects(t, "/ui/signin")
	if _, err := b.w.Redeliver(b.ctx, m.ID, m.Deliveries[0].ID, commands.Action{Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-s.events:
		if ok {
			t.Fatalf("after the sign-out: %q", ev)
		}
	case <-time.After(testpoll.Timeout):
		t.Fatalf("the stream still open %s after a move past the sign-out", testpoll.Timeout)
	}
}

// smallBuffers gives each accepted connection a small send buffer, so a
// reader that stalls blocks the server's writes after a few events.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestLiveHistoryCutsAStalledReader: a browser that stops reading its
// stream loses it once a write waits past the write deadline, and its
// session's place is free again.
func TestLiveHistoryCutsAStalledReader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// No breaker: the test fails the delivery as often as it takes to
	// fill the buffers, which would open one.
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`), Health: &lifecycle.Health{}}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	m := b.ingest(t, "hello")
	b.setCaps(t, 10, 1)
	cons, err := console.New(console.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db,
		Tokens: b.tokens, LivePoll: 20 * time.Millisecond, LiveWriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Stop(context.Background()) })
	srv := httptest.NewUnstartedServer(cons)
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	c := b.clientOf(t, srv)
	c.signIn(t, b.admin).want(t, http.StatusSeeOther)
	base, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var cookies []string
	page, err := url.Parse(srv.URL + "/ui/messages/" + m.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range c.http.Jar.Cookies(page) {
		cookies = append(cookies, k.Name+"="+k.Value)
	}

	// The stalled reader: a small receive buffer, the request sent, the
	// answer never read.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.DialContext(b.ctx, "tcp", base.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// It has the history so far: only what comes next fills its buffers.
	fmt.Fprintf(conn, "GET /ui/messages/%s/live?after=%d HTTP/1.1\r\nHost: %s\r\nCookie: %s\r\nAccept: text/event-stream\r\n\r\n",
		m.ID, m.Version, base.Host, strings.Join(cookies, "; "))
	// Its answer began before the probes below open streams of their own,
	// any of which would take the place first and have it refused.
	if err := conn.SetReadDeadline(time.Now().Add(testpoll.Timeout)); err != nil {
		t.Fatal(err)
	}
	if status, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("the stalled reader's answer: %q, %v", status, err)
	}
	// Its stream holds the session's one place.
	testpoll.Until(t, "the stalled reader's stream holds the session's place", func() bool {
		s := c.openStream(t, m.ID.String())
		s.close()
		return s.resp.StatusCode == http.StatusTooManyRequests
	})

	// Each change sends the history and the state, a few KiB, until the
	// buffers are full and a write waits for the reader.
	d0 := m.Deliveries[0].ID
	testpoll.Until(t, "the stalled reader's stream is cut", func() bool {
		b.settle(t, d0, lifecycle.Failed(strings.Repeat("refused ", 100)))
		if _, err := b.w.Redeliver(b.ctx, m.ID, d0, commands.Action{Operator: "alice", Reason: strings.Repeat("again ", 100)}); err != nil {
			t.Fatal(err)
		}
		s := c.openStream(t, m.ID.String())
		s.close()
		return s.resp.StatusCode == http.StatusOK
	})
}

// TestSettingsCapTheLiveHistories: the settings page shows and saves the
// caps, and refuses a cap out of bounds naming it.
func TestSettingsCapTheLiveHistories(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.signedIn(t, b.reader).get(t, "/ui/settings").want(t, http.StatusOK).
		has(t, "<dd>4 (<code>console.max_streams_per_session</code>)", "<dd>256 (<code>console.max_streams</code>)")
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/settings").want(t, http.StatusOK).
		has(t, `name="console.max_streams_per_session" value="4"`, `name="console.max_streams" value="256"`)
	c.post(t, "/ui/settings", url.Values{"console.max_streams_per_session": {"65"}}).want(t, http.StatusBadRequest).
		has(t, "<code>console.max_streams_per_session</code>: must be from 1 to 64 live histories, got 65", `value="65"`)
	c.post(t, "/ui/settings", url.Values{"console.max_streams": {"many"}}).want(t, http.StatusBadRequest).
		has(t, "<code>console.max_streams</code>: must be a whole number")
	c.post(t, "/ui/settings", url.Values{"console.max_streams_per_session": {"2"}, "console.max_streams": {"30"}}).
		redirects(t, "/ui/settings")
	if s, err := b.w.Settings(b.ctx); err != nil || s.Console != (lifecycle.ConsoleSettings{MaxStreams: 30, MaxStreamsPerSession: 2}) {
		t.Errorf("settings %+v, %v", s, err)
	}
}
