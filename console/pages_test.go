package console_test

import (
	"bufio"
	"bytes"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

func TestDashboardShowsTheFigures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	b.fifo(t, "orders")
	m := b.ingest(t, "one")
	b.settle(t, m.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
	b.ingest(t, "two")
	b.clock.Advance(time.Minute)
	c := b.signedIn(t, b.reader)
	c.get(t, "/ui/").want(t, http.StatusOK).has(t,
		`<td data-label="Ordering">none</td>`, `<a id="figure-lanes-orders" href="/ui/targets/orders/lanes" aria-label="fifo: the lanes of orders">fifo</a>`,
		`<dt>In flight</dt>`, `<span class="figure">1</span>`,
		`<dt>Failed or stalled in 24 h</dt>`,
		`href="/ui/messages?created_after=2026-11-30T08%3A01%3A00&amp;status=error"`,
		`<span class="badge tone-bad">Failed</span></td><td class="num" data-label="Deliveries">1</td>`,
		"1 due now, the oldest due for 50s",
		`href="/ui/targets/billing"`, `hx-trigger="every 5s"`,
		// billing: "two" in flight and due, "one" failed; orders has had
		// no delivery.
		`<td class="num" data-label="In flight">1</td>
<td class="num" data-label="Failed or stalled in 24 h">1</td>
<td data-label="Oldest due">due for 50s</td>
<td data-label="Messages"><a id="figure-messages-billing"`,
		`<td class="num" data-label="In flight">0</td>
<td class="num" data-label="Failed or stalled in 24 h">0</td>
<td data-label="Oldest due"><span class="muted">none due</span></td>
<td data-label="Messages"><a id="figure-messages-orders"`)
}

func TestMessagesListFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	// Its twelve failures within a minute would open the breaker, which
	// would hold the deliveries settled by hand below.
	after := lifecycle.Duration(lifecycle.DefaultDisableAfter)
	if _, err := b.w.UpdateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: []byte(`{"url":"http://127.0.0.1:9/"}`), Health: &lifecycle.Health{DisableAfter: &after}}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for i := range 120 {
		m := b.ingestKeyed(t, "erp", []string{"", "p-1", "p 2"}[i%3], fmt.Sprint(i))
		if i%10 == 0 {
			b.settle(t, m.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
		}
		ids = append(ids, m.ID)
		if i%3 == 0 {
			b.clock.Advance(time.Second) // some share a created_at, some do not
		}
	}
	slices.Reverse(ids)
	c := b.signedIn(t, b.reader)

	// Every page in turn gives the whole list, newest first, by id
	// within a time.
	link := regexp.MustCompile(`href="/ui/messages/([0-9a-f-]{36})"`)
	next := regexp.MustCompile(`href="(/ui/messages\?[^"]*)" rel="next"`)
	var got []uuid.UUID
	path := "/ui/messages"
	for pages := 0; path != ""; pages++ {
		if pages > 5 {
			t.Fatal("the pages never end")
		}
		a := c.get(t, path).want(t, http.StatusOK)
		for _, m := range link.FindAllStringSubmatch(a.body, -1) {
			got = append(got, uuid.MustParse(m[1]))
		}
		path = ""
		if m := next.FindStringSubmatch(a.body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
			a.has(t, "Next page")
		}
	}
	want, err := listIDs(b, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || len(got) != 120 {
		t.Fatalf("the pages gave %d messages, the list has %d", len(got), len(want))
	}

	// The filters are the API's.
	for _, q := range []url.Values{
		{"status": {"error"}},
		{"source": {"erp"}, "status": {"in_progress"}},
		{"target": {"billing"}, "created_after": {"2026-12-01T08:00:10"}},
		{"created_before": {"2026-12-01T08:00:05Z"}},
		{"created_after": {"2026-12-01T08:00:10"}, "created_before": {"2026-12-01T08:00:20"}, "status": {"error"}},
		{"ordering_key": {"p-1"}},
		{"ordering_key": {"p 2"}, "status": {"error"}},
		{"ordering_key": {"nobody's"}},
	} {
		a := c.get(t, "/ui/messages?"+q.Encode()).want(t, http.StatusOK)
		var got []uuid.UUID
		for _, m := range link.FindAllStringSubmatch(a.body, -1) {
			got = append(got, uuid.MustParse(m[1]))
		}
		want, err := listIDs(b, q)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want[:min(len(want), 50)]) {
			t.Errorf("%s: %d messages, the API lists %d", q.Encode(), len(got), len(want))
		}
		if v := q.Get("status"); v != "" {
			a.has(t, `<option value="`+v+`" selected>`)
		}
	}

	// The status filter offers every status; the ordering key filter
	// keeps what it was given.
	a := c.get(t, "/ui/messages?ordering_key=p+2").has(t, `name="ordering_key" value="p 2"`)
	for _, st := range lifecycle.MessageStatuses {
		a.has(t, `<option value="`+string(st)+`">`+st.Label()+`</option>`)
	}

	// A wrong filter names its field, in the API's words, and lists
	// nothing.
	c.get(t, "/ui/messages?status=lost&source=Bad+Name&created_after=yesterday").want(t, http.StatusBadRequest).
		has(t, "<code>status</code>", "<code>source</code>", "<code>created_after</code>", `value="yesterday"`).
		lacks(t, `<table id="messages">`)
	for _, key := range []string{strings.Repeat("k", 201), "a\x01b"} {
		c.get(t, "/ui/messages?"+url.Values{"ordering_key": {key}}.Encode()).want(t, http.StatusBadRequest).
			has(t, "<code>ordering_key</code>: "+html.EscapeString(lifecycle.CheckOrderingKey("ordering_key", key).(*lifecycle.FieldError).Problem)).
			lacks(t, `<table id="messages">`)
	}
	c.get(t, "/ui/messages?cursor=bogus").want(t, http.StatusBadRequest).has(t, "<code>cursor</code>")
}

// listIDs is what the list must give for the query q, every page: the
// ids of the messages matching it, by (created_at, id) descending.
func listIDs(b *bundle, q url.Values) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	rows, err := b.db.Query(b.ctx, `SELECT id FROM messages m WHERE
		($1 = '' OR status = $1) AND ($2 = '' OR source = $2) AND ($6 = '' OR ordering_key = $6)
		AND ($3 = '' OR EXISTS (SELECT FROM deliveries d WHERE d.message_id = m.id AND d.target = $3))
		AND ($4::timestamptz IS NULL OR created_at > $4) AND ($5::timestamptz IS NULL OR created_at < $5)
		ORDER BY created_at DESC, id DESC`,
		q.Get("status"), q.Get("source"), q.Get("target"), timeOf(q.Get("created_after")), timeOf(q.Get("created_before")),
		q.Get("ordering_key"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func timeOf(v string) *time.Time {
	if v == "" {
		return nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.Parse(layout, v); err == nil {
			return &t
		}
	}
	panic(v)
}

func TestPayloadPreview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.reader)
	ingest := func(contentType string, payload []byte) string {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", ContentType: contentType, Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		return "/ui/messages/" + m.ID.String()
	}

	// Text is shown, escaped: a payload cannot write the page.
	page := ingest("text/html", []byte(`<script>alert("x")</script> & ünïcode`))
	c.get(t, page).want(t, http.StatusOK).
		has(t, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; ünïcode`, "Download the payload").
		lacks(t, `<script>alert`)
	dl := c.get(t, page+"/payload").want(t, http.StatusOK)
	if dl.body != `<script>alert("x")</script> & ünïcode` || dl.header.Get("Content-Type") != "text/html" ||
		!strings.HasPrefix(dl.header.Get("Content-Disposition"), "attachment") ||
		dl.header.Get("Content-Security-Policy") != "default-src 'none'; sandbox" || dl.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("download %q, headers %v", dl.body, dl.header)
	}

	// Bytes that are not text show their size and hash.
	c.get(t, ingest("application/octet-stream", []byte{0, 1, 2, 0xff, 'a'})).
		has(t, "Not text: 5 bytes of <code>application/octet-stream</code>", "SHA-256")

	// A long text shows its beginning, cut at a character.
	long := append(bytes.Repeat([]byte("x"), 64<<10-1), []byte("éé")...)
	c.get(t, ingest("text/plain", long)).has(t, "The first 64.0 KiB (65,535 bytes) of 64.0 KiB (65,539 bytes).").
		lacks(t, "\uFFFD")
}

// TestExpungedPayload: the page of a message whose payload retention
// expunged shows it, with the size and digest kept, offers no download,
// resend or replay, and the download answers 410 PAYLOAD_EXPUNGED.
func TestExpungedPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	b.settle(t, m.Deliveries[0].ID, lifecycle.Delivered("200 OK"))
	settings := lifecycle.DefaultSettings()
	settings.Retention.PayloadAfter = new(lifecycle.Duration(time.Second))
	if err := b.w.SetSettings(b.ctx, settings, "operator:test"); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Second)
	if done, err := b.w.ExpungePayload(b.ctx, m.ID); !done || err != nil {
		t.Fatalf("expunge: %v, %v", done, err)
	}
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + m.ID.String()
	c.get(t, page).want(t, http.StatusOK).has(t, "Expunged by retention: 5 bytes", m.PayloadSHA256).
		lacks(t, "Download the payload", page+"/resend", page+"/replay", page+"/redispatch", "/redeliver")
	c.get(t, page+"/payload").want(t, http.StatusGone).has(t, "payload expunged by retention")
}

func TestLiveHistoryFollowsTheJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	d := m.Deliveries[0]
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/messages/"+m.ID.String()).has(t, `sse-connect="/ui/messages/`+m.ID.String()+`/live?after=2"`)

	// The stream is read as a browser reads it, on its own goroutine.
	open := func(after string, lastEventID string) (*http.Response, <-chan string) {
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.srv.URL+"/ui/messages/"+m.ID.String()+"/live?after="+after, nil)
		if err != nil {
			t.Fatal(err)
		}
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		events := make(chan string, 16)
		go func() {
			defer close(events)
			var ev strings.Builder
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if sc.Text() == "" && ev.Len() > 0 {
					events <- ev.String()
					ev.Reset()
					continue
				}
				ev.WriteString(sc.Text() + "\n")
			}
		}()
		return resp, events
	}
	next := func(events <-chan string) string {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10 s")
		}
		return ""
	}

	resp, events := open("2", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live answer %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if ev := next(events); ev != "retry: 2000\n" {
		t.Fatalf("first event %q", ev)
	}
	if ev := next(events); !strings.HasPrefix(ev, "event: status\n") || !strings.Contains(ev, "followed live") {
		t.Fatalf("second event %q", ev)
	}
	b.settle(t, d.ID, lifecycle.Failed("400 Bad Request"))
	// The claim and the outcome are two commits: the stream may send them
	// as one history event or as two, each with its state.
	var history, state string
	for !strings.Contains(state, "id: 4\n") {
		switch ev := next(events); {
		case strings.HasPrefix(ev, "event: history\n"):
			history += ev
		default:
			state = ev
		}
	}
	for _, want := range []string{"event: history\n", `data: <tr id="event-3">`, `<tr id="event-4">`, "delivery.attempted"} {
		if !strings.Contains(history, want) {
			t.Errorf("the history event lacks %q:\n%s", want, history)
		}
	}
	for _, want := range []string{"event: state\nid: 4\n", `data: <div id="deliveries" hx-swap-oob="true">`,
		`data: <tr id="delivery-` + d.ID.String() + `">`, `<span class="badge tone-bad">Failed</span>`,
		`data: <div id="summary" hx-swap-oob="true">`, "Redeliver to billing"} {
		if !strings.Contains(state, want) {
			t.Errorf("the state event lacks %q:\n%s", want, state)
		}
	}

	// A browser that reconnects resumes after the last event it has.
	if _, err := b.w.Redeliver(b.ctx, m.ID, d.ID, commands.Action{Operator: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, again := open("0", "4")
	next(again) // retry
	next(again) // status
	if ev := next(again); strings.Contains(ev, `id="event-4"`) || !strings.Contains(ev, `id="event-5"`) {
		t.Errorf("resumed after 4:\n%s", ev)
	}
	if ev := next(again); !strings.Contains(ev, "id: 5\n") {
		t.Errorf("resumed after 4, the state:\n%s", ev)
	}

	// A stream ends with the console, whose Stop is safe twice.
	var _ service.Service = b.console
	b.console.Stop(t.Context())
	b.console.Stop(t.Context())
	for range events {
	}
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	for _, p := range []string{"/ui/signin", "/ui/", "/ui/static/console.css", "/ui/nothing"} {
		a := c.get(t, p)
		if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") ||
			strings.Contains(csp, "unsafe") || a.header.Get("X-Frame-Options") != "DENY" ||
			a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", p, a.header)
		}
	}
	// The static files are served with their version for a year, without
	// it for no time.
	page := c.get(t, "/ui/signin").body
	css := regexp.MustCompile(`href="(/ui/static/console.css\?v=[0-9a-f]+)"`).FindStringSubmatch(page)
	if css == nil {
		t.Fatal("no stylesheet link")
	}
	if a := c.get(t, css[1]).want(t, http.StatusOK); a.header.Get("Cache-Control") != "public, max-age=31536000, immutable" ||
		!strings.HasPrefix(a.header.Get("Content-Type"), "text/css") {
		t.Errorf("versioned stylesheet headers %v", a.header)
	}
	if a := c.get(t, "/ui/static/console.css").want(t, http.StatusOK); a.header.Get("Cache-Control") != "no-cache" {
		t.Errorf("unversioned stylesheet headers %v", a.header)
	}
}

// TestMessageShowsItsLane: the message page names its ordering key and
// each delivery's place in its lane.
func TestMessageShowsItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifo(t, "orders")
	b.ingestKeyed(t, "shop", "order 4711", "first")
	blocked := b.ingestKeyed(t, "shop", "order 4711", "second")
	c := b.signedIn(t, b.reader)
	c.get(t, "/ui/messages/"+blocked.ID.String()).want(t, http.StatusOK).has(t,
		`<dt>Ordering key</dt><dd><a href="/ui/messages?ordering_key=order%204711"`,
		`<td class="num" data-label="Place in lane">2</td>`, `<span class="badge tone-warn">Blocked</span>`)
	// A message without a key has no column of places.
	b.target(t, "billing")
	plain := b.ingest(t, "no key")
	c.get(t, "/ui/messages/"+plain.ID.String()).want(t, http.StatusOK).lacks(t, "Ordering key", "Place in lane")
}

// TestLanesOfAFIFOTarget: the target's lanes are listed as the API lists
// them, by ordering key, in pages, all or the blocked only, each with its
// head and the deliveries waiting.
func TestLanesOfAFIFOTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifo(t, "orders")
	b.target(t, "billing")
	var keys []string
	heads := map[string]*projection.Message{}
	for i := range 60 {
		key := fmt.Sprintf("order-%02d", i)
		keys = append(keys, key)
		heads[key] = b.ingestKeyed(t, "shop", key, "first")
	}
	b.clock.Advance(time.Minute)
	b.ingestKeyed(t, "shop", "order-07", "second")
	b.ingestKeyed(t, "shop", "order-07", "third")
	head := heads["order-07"]
	b.settle(t, head.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
	c := b.signedIn(t, b.reader)

	// The target shows its ordering and leads to its lanes.
	c.get(t, "/ui/targets/orders").want(t, http.StatusOK).has(t, "<code>fifo</code>", "<code>block</code>",
		`href="/ui/targets/orders/lanes"`)
	c.get(t, "/ui/targets/billing").want(t, http.StatusOK).has(t, "<code>none</code>").lacks(t, `href="/ui/targets/billing/lanes"`)

	// Every page in turn gives every lane, by key.
	keyLink := regexp.MustCompile(`href="/ui/messages\?ordering_key=([^"]+)"`)
	next := regexp.MustCompile(`href="(/ui/targets/orders/lanes\?[^"]*)" rel="next"`)
	var got []string
	path := "/ui/targets/orders/lanes"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("the pages never end")
		}
		a := c.get(t, path).want(t, http.StatusOK)
		for _, m := range keyLink.FindAllStringSubmatch(a.body, -1) {
			key, err := url.QueryUnescape(m[1])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, key)
		}
		if pages == 1 {
			a.has(t, `href="/ui/targets/orders/lanes">First page</a>`)
		}
		path = ""
		if m := next.FindStringSubmatch(a.body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("the pages list the lanes %v", got)
	}

	// The blocked only: the lane of the failed head, which links to its
	// message, and the two waiting behind it.
	a := c.get(t, "/ui/targets/orders/lanes?blocked=true").want(t, http.StatusOK).
		has(t, `name="blocked" value="true" checked`, `href="/ui/messages/`+head.ID.String()+`"`,
			`<span class="badge tone-bad">Failed</span>`, `<td class="num" data-label="Waiting">2</td>`,
			`<td class="nowrap" data-label="Waiting since">2026-12-01T08:01:00Z</td>`)
	if n := len(keyLink.FindAllString(a.body, -1)); n != 1 {
		t.Errorf("%d lanes blocked, want 1", n)
	}

	// Wrong parameters are refused in the API's words.
	c.get(t, "/ui/targets/orders/lanes?blocked=maybe").want(t, http.StatusBadRequest).
		has(t, `<code>blocked</code>: &#34;maybe&#34;: allowed are true, false`).lacks(t, `<table id="lanes"`)
	c.get(t, "/ui/targets/orders/lanes?cursor=!").want(t, http.StatusBadRequest).has(t, "<code>cursor</code>")

	// A target that keeps no order says so, and has no lanes.
	c.get(t, "/ui/targets/billing/lanes").want(t, http.StatusOK).has(t, "keeps no order now", "No lane holds work.")
}
