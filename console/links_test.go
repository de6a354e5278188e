package console_test

import (
	"context"
	"encoding/json"
	"html"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
)

// linkAttr finds the links and form targets of a page or a template: what
// a browser follows, posts to, loads or connects to.
var linkAttr = regexp.MustCompile(`(href|action|src|hx-get|sse-connect)="([^"]*)"`)

// templateAttr is linkAttr in a template, whose actions may hold quotes.
var templateAttr = regexp.MustCompile(`(href|action|src|hx-get|sse-connect)="((?:[^"{]|\{\{.*?\}\})*)"`)

// formAttr finds a form's method and target.
var formAttr = regexp.MustCompile(`<form[^>]*method="(get|post)"[^>]*action="([^"]*)"`)

// TestEveryLinkInATemplateIsServed follows every link of every page from
// the dashboard, as an admin, over data that shows each kind of page, and
// posts to every form target with a stale token: each link is served, and
// each form reaches its action (which refuses the stale token). Then every
// link written in a template must be one of those followed.
func TestEveryLinkInATemplateIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	b.target(t, "archive")
	failed := b.ingest(t, "to fail")
	b.settle(t, failed.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
	b.settle(t, failed.Deliveries[1].ID, lifecycle.Delivered("200 OK"))
	// A lane whose failed head holds a delivery blocked behind it.
	b.fifo(t, "orders")
	head := b.ingestKeyed(t, "shop", "order-4711", "first")
	b.ingestKeyed(t, "shop", "order-4711", "second")
	b.settle(t, head.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
	// A possible duplicate of a binary message, and the failed one sent
	// again: a generation after another.
	for range 2 {
		if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
			ContentType: "application/octet-stream", Payload: []byte{0, 1, 2}, DuplicateKey: "ctl-1"}); err != nil {
			t.Fatal(err)
		}
	}
	// A scheduled message, which an operator may deliver now.
	if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain",
		Payload: []byte("later"), DeliverAt: b.clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	resent, err := b.w.Resend(b.ctx, failed.ID, []string{"billing"}, commands.Action{Operator: "setup"})
	if err != nil {
		t.Fatal(err)
	}
	b.settle(t, resent.Deliveries[2].ID, lifecycle.Failed("400 Bad Request"))
	ts, err := b.w.Targets(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ts[0].Enabled = false
	if _, err := b.w.UpdateTarget(b.ctx, ts[0], "operator:setup"); err != nil {
		t.Fatal(err)
	}

	// A target whose breaker opened: its Close breaker.
	breaker := &lifecycle.Breaker{Window: lifecycle.Duration(time.Minute), MinRequests: 1, FailureRate: 1,
		Cooldown: lifecycle.Duration(time.Minute), MaxCooldown: lifecycle.Duration(time.Hour)}
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "flaky", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`), Health: &lifecycle.Health{Breaker: breaker}}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "iot", From: "*", To: "*", Target: "flaky"}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	tripped, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "iot", From: "acme", To: "globex", ContentType: "text/plain", Payload: []byte("trips")})
	if err != nil {
		t.Fatal(err)
	}
	b.settle(t, tripped.Deliveries[0].ID, lifecycle.Failed("503 Service Unavailable"))

	// Sources, one of them disabled: their pages and actions.
	b.inbox(t, "aodb")
	b.source(t, "drop", "directory", false, `{"dir": "/var/spool/in", "from": "acme", "to": "globex"}`)

	// A bulk operation that runs: its page, its cancel, the list.
	if _, err := b.w.CreateOperation(b.ctx, commands.OperationSpec{Action: lifecycle.ActionRedeliver,
		Filter: lifecycle.OperationFilter{Target: "billing"}}, "setup"); err != nil {
		t.Fatal(err)
	}

	c := b.signedIn(t, b.admin)
	followed := map[string]bool{}
	posted := map[string]bool{}
	queue := []string{"/ui/"}
	for len(queue) > 0 {
		link := queue[0]
		queue = queue[1:]
		if followed[link] {
			continue
		}
		followed[link] = true
		if strings.HasSuffix(strings.SplitN(link, "?", 2)[0], "/live") {
			checkStream(t, c, link)
			continue
		}
		a := c.get(t, link)
		if a.status != http.StatusOK {
			t.Errorf("GET %s: %d", link, a.status)
			continue
		}
		if !strings.HasPrefix(a.header.Get("Content-Type"), "text/html") {
			continue
		}
		forms := map[string]string{}
		for _, m := range formAttr.FindAllStringSubmatch(a.body, -1) {
			forms[html.UnescapeString(m[2])] = m[1]
		}
		for _, m := range linkAttr.FindAllStringSubmatch(a.body, -1) {
			target := html.UnescapeString(m[2])
			if strings.HasPrefix(target, "#") {
				continue
			}
			if !strings.HasPrefix(target, "/ui/") {
				t.Errorf("%s links outside the console: %s", link, target)
				continue
			}
			if m[1] == "action" && forms[target] == "post" {
				posted[target] = true
				continue
			}
			queue = append(queue, target)
		}
	}
	for target := range posted {
		// A stale token: the route is found and its role allowed, and the
		// form is refused for the token, not for a missing page.
		c.post(t, target, url.Values{"csrf": {"stale"}}).want(t, http.StatusForbidden).has(t, "not from this session")
	}
	signedOut := b.client(t)
	signin := signedOut.get(t, "/ui/signin").want(t, http.StatusOK)
	followed["/ui/signin"] = true
	for _, m := range linkAttr.FindAllStringSubmatch(signin.body, -1) {
		target := html.UnescapeString(m[2])
		if strings.HasPrefix(target, "#") {
			continue
		}
		if m[1] == "action" {
			signedOut.post(t, target, url.Values{"csrf": {"stale"}}).want(t, http.StatusForbidden)
			posted[target] = true
			continue
		}
		signedOut.get(t, target).want(t, http.StatusOK)
		followed[target] = true
	}
	if len(followed) < 20 {
		t.Fatalf("the crawl followed only %d links", len(followed))
	}

	// Every link a template writes is one the crawl followed or posted to.
	all := slices.Concat(slices.Collect(maps.Keys(followed)), slices.Collect(maps.Keys(posted)))
	err = fs.WalkDir(os.DirFS("templates"), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile("templates/" + name)
		if err != nil {
			return err
		}
		for _, m := range templateAttr.FindAllStringSubmatch(string(data), -1) {
			if strings.HasPrefix(m[2], "#") {
				continue
			}
			pattern := templateLink(m[2])
			if !slices.ContainsFunc(all, pattern.MatchString) {
				t.Errorf("%s: the link %s=%q was never followed: make the test's data show it", name, m[1], m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// templateLink is the pattern of the links a template's attribute value
// writes: its text as it is, each action any text.
func templateLink(v string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for {
		i := strings.Index(v, "{{")
		if i < 0 {
			break
		}
		b.WriteString(regexp.QuoteMeta(v[:i]))
		b.WriteString(".*")
		j := strings.Index(v[i:], "}}")
		v = v[i+j+2:]
	}
	b.WriteString(regexp.QuoteMeta(v))
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// checkStream opens a live history and checks it is an event stream.
func checkStream(t *testing.T, c *client, link string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.b.ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+link, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("GET %s: %d %s", link, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
