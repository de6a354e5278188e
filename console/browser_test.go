package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// screenshotsEnv names the directory, relative to this package, that the
// browser test writes the screenshots of docs/ui.md to; unset, it takes
// none.
const screenshotsEnv = "WAYBILL_SCREENSHOTS"

// chromiumPath finds the browser: WAYBILL_CHROMIUM, else Chromium or
// Chrome on PATH. Without one the test fails, saying how to get one: a
// console never seen in a browser is not tested.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("WAYBILL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the browser tests need Chromium and found none on PATH: install it (Debian, as root: " +
		"apt-get install chromium; .ci/run does) or set WAYBILL_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// browser is one headless Chromium, one tab, that the steps of the test
// share. It gathers every error the pages log: uncaught exceptions,
// console errors, failed loads and Content-Security-Policy violations.
type browser struct {
	ctx  context.Context
	base string
	// shots is where the screenshots go; "" for none.
	shots string

	mu       sync.Mutex
	problems []string
	// expected are the failed loads a test asked for, as text|URL: an
	// answer of 412 to a stale action, say.
	expected []string
}

func startBrowser(t *testing.T, base string) *browser {
	t.Helper()
	exe := chromiumPath(t)
	dir, err := os.MkdirTemp("", "waybill-chromium-*")
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(dir), chromedp.WindowSize(1280, 900))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
		// The browser's children may still write for a moment after it
		// stops.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	br := &browser{ctx: ctx, base: base}
	if d := os.Getenv(screenshotsEnv); d != "" {
		br.shots = d
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				br.mu.Lock()
				br.problems = append(br.problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				br.mu.Unlock()
			}
		}
	}()
	// A violation of the policy is logged too, but its event says best
	// which rule refused what.
	_, err = chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `document.addEventListener("securitypolicyviolation", e =>
			console.error("Content-Security-Policy violation: " + e.violatedDirective + " refused " + e.blockedURI))`})
	if err != nil {
		t.Fatal(err)
	}
	return br
}

// do runs the steps within a time bound, and fails the test if one fails
// or a page logged an error.
func (br *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
	br.clean(t)
}

// load runs the steps, which lead to a page, and waits for it.
func (br *browser) load(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	br.loadStatus(t, 200, steps...)
}

// loadStatus is load of a page answered with the status.
func (br *browser) loadStatus(t *testing.T, status int64, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != status {
		t.Fatalf("%s answered %d, want %d", resp.URL, resp.Status, status)
	}
	if status != 200 {
		// The browser logs an answer that is not a success as a failed
		// load, maybe after this returns; this one was expected.
		br.mu.Lock()
		br.expected = append(br.expected, fmt.Sprintf("the server responded with a status of %d (%s)", status, resp.StatusText)+"|"+resp.URL)
		br.mu.Unlock()
	}
	br.clean(t)
}

func (br *browser) open(t *testing.T, path string) {
	t.Helper()
	br.load(t, chromedp.Navigate(br.base+path))
}

// focus waits until the element with the focus reads want, as autofocus
// gives it once the page has rendered (which may come after its load),
// and fails the test when it never does.
func (br *browser) focus(t *testing.T, want string) {
	t.Helper()
	quoted, _ := json.Marshal(want)
	ctx, cancel := context.WithTimeout(br.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.activeElement?.textContent === `+string(quoted))); err != nil {
		t.Fatalf("the focus is on %q, want %q: %v", eval[string](t, br, `document.activeElement.textContent`), want, err)
	}
}

// eval is the value of a JavaScript expression on the page.
func eval[T any](t *testing.T, br *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// text is the visible text of the first element sel selects.
func (br *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// clean fails the test with the errors the pages logged since the last
// check.
func (br *browser) clean(t *testing.T) {
	t.Helper()
	br.mu.Lock()
	problems := br.problems
	br.problems = nil
	expected := br.expected
	br.mu.Unlock()
	for _, p := range problems {
		if !slices.ContainsFunc(expected, func(e string) bool {
			text, url, _ := strings.Cut(e, "|")
			return strings.Contains(p, text) && strings.Contains(p, url)
		}) {
			t.Errorf("the page logged %s", p)
		}
	}
}

// dark puts the page in the dark theme, or back in the light one.
func (br *browser) dark(t *testing.T, on bool) {
	t.Helper()
	var features []*emulation.MediaFeature
	if on {
		features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}
	}
	br.do(t, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features})
		return err
	}))
}

// charts checks that the page shows n charts, each an image with a title
// and a description and a table of its figures.
func (br *browser) charts(t *testing.T, n int) {
	t.Helper()
	got := eval[int](t, br, `[...document.querySelectorAll("figure.chart")].filter(f => {
		const svg = f.querySelector("svg[role=img]");
		return svg && svg.querySelector("title").textContent && svg.querySelector("desc").textContent &&
			f.querySelector("details summary") && svg.getBoundingClientRect().height > 100;
	}).length`)
	if got != n {
		t.Errorf("%d charts with a title, a description, a table and room on the page, want %d", got, n)
	}
}

// shot writes a screenshot of the whole page, when screenshots are asked
// for.
func (br *browser) shot(t *testing.T, name string) {
	t.Helper()
	if br.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(br.shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// scene is the data the browser test shows: two targets with routes, a
// third one disabled, a fourth that keeps order per key, and messages in
// most statuses.
type scene struct {
	failed                       *projection.Message
	billing                      projection.Delivery
	errors, duplicates, messages int
}

func setScene(t *testing.T, b *bundle) scene {
	t.Helper()
	b.target(t, "billing")
	b.target(t, "archive")
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "ledger", Kind: "file", Enabled: false,
		Config: json.RawMessage(`{"dir":"/var/spool/ledger"}`)}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "crm", From: "*", To: "acme", Target: "ledger"}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	b.fifo(t, "orders") // its messages come with the test of its lanes
	b.inbox(t, "aodb")
	b.source(t, "drop", "directory", true, `{"dir": "/var/spool/erp", "pattern": "*.json", "from": "globex", "to": "acme",
		"content_type": "application/json"}`)
	var sc scene
	ingestKeyed := func(source, contentType, payload, duplicateKey string) *projection.Message {
		b.clock.Advance(7 * time.Minute)
		sc.messages++
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: source, From: "globex", To: "acme",
			ContentType: contentType, Payload: []byte(payload), DuplicateKey: duplicateKey})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ingest := func(source, contentType, payload string) *projection.Message {
		return ingestKeyed(source, contentType, payload, "")
	}
	// Invoices, the last one sent twice by its sender: a possible
	// duplicate.
	for i := range 6 {
		invoice := 4700 + min(i, 4)
		m := ingestKeyed("erp", "application/json", fmt.Sprintf(`{"invoice": %d, "lines": [{"sku": "A-%d", "qty": 2}]}`, invoice, i),
			fmt.Sprintf("INV-%d", invoice))
		b.settle(t, m.Deliveries[0].ID, lifecycle.Delivered("200 OK"))
		b.settle(t, m.Deliveries[1].ID, lifecycle.Delivered("200 OK"))
	}
	sc.duplicates++
	m := ingest("erp", "application/json", `{"order": 4711, "customer": "ACME <purchasing@acme.example>", "total": "1,204.50"}`)
	archive, billing := m.Deliveries[0], m.Deliveries[1] // by target name
	b.settle(t, billing.ID, lifecycle.Retry(b.clock.Now().Add(time.Minute), "503 Service Unavailable"))
	b.clock.Advance(time.Minute)
	b.settle(t, billing.ID, lifecycle.Failed("400 Bad Request: unknown customer ACME"))
	sc.failed = b.settle(t, archive.ID, lifecycle.Delivered("200 OK"))
	sc.billing = *sc.failed.Delivery(billing.ID)
	sc.errors++
	m = ingest("erp", "application/json", `{"order": 4712}`)
	b.settle(t, m.Deliveries[1].ID, lifecycle.Retry(b.clock.Now().Add(10*time.Minute), "502 Bad Gateway"))
	ingest("erp", "application/octet-stream", "\x00\x01binary\xff")
	ingest("crm", "text/plain", "a note for acme")
	ingest("hr", "text/plain", "nobody routes hr")
	accepted, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "erp", From: "globex", To: "acme",
		ContentType: "text/plain", Payload: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Refuse(b.ctx, accepted.ID, lifecycle.RefusalRejected, "a repeat of order 4711", "source:erp"); err != nil {
		t.Fatal(err)
	}
	sc.messages++
	b.clock.Advance(time.Minute)
	return sc
}

// TestInTheBrowser drives the console in headless Chromium as an operator
// would: sign-in, the dashboard, a filtered list, a message, an action with
// its confirmation, the live history, and the other pages, at 1280 and at
// 400 pixels wide, by keyboard where it matters, in both themes; no page
// may log an error. With WAYBILL_SCREENSHOTS=../docs/ui it writes the
// screenshots of docs/ui.md.
func TestInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := setScene(t, b)
	br := startBrowser(t, b.srv.URL)
	msg := "/ui/messages/" + sc.failed.ID.String()

	t.Run("sign in", func(t *testing.T) {
		br.open(t, "/ui/messages")
		if got := br.text(t, "h1"); got != "Sign in to Waybill" {
			t.Fatalf("a page without a session shows %q", got)
		}
		br.shot(t, "signin")
		br.do(t, chromedp.SendKeys(chromedp.CSS("#token"), b.admin))
		br.load(t, chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter))
		// Back on the page that asked for the sign-in.
		if got := br.text(t, "h1"); got != "Messages" {
			t.Fatalf("after the sign-in: %q", got)
		}
	})

	t.Run("dashboard", func(t *testing.T) {
		br.open(t, "/ui/")
		for sel, want := range map[string]string{
			".card:nth-child(1) .figure": "3",
			".card:nth-child(2) .figure": "1",
			".card:nth-child(3) .figure": "1",
			".card:nth-child(4) .figure": fmt.Sprint(sc.messages),
		} {
			if got := br.text(t, sel); got != want {
				t.Errorf("%s shows %q, want %q", sel, got, want)
			}
		}
		br.shot(t, "dashboard")
		// The first key press reaches the link past the bar.
		br.do(t, chromedp.KeyEvent(kb.Tab))
		if got := eval[string](t, br, `document.activeElement.textContent`); got != "Skip to content" {
			t.Errorf("the first Tab reaches %q", got)
		}
		// A refresh of the figures keeps the focus where it was.
		br.do(t, chromedp.Focus(chromedp.CSS(".card:nth-child(4) a")))
		ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
		defer cancel()
		focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`htmx.ajax("GET", "/ui/",
			{target: "#figures", select: "#figures", swap: "outerHTML"}).then(() => document.activeElement.textContent)`, chromedp.EvalAwaitPromise))
		if err != nil || focused != "Every message of the last 7 days" {
			t.Errorf("after a refresh the focus is on %q (%v)", focused, err)
		}
		br.charts(t, 4)
		br.dark(t, true)
		if bg := eval[string](t, br, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(13, 17, 23)" {
			t.Errorf("the dark theme's page is %s", bg)
		}
		if fill := eval[string](t, br, `getComputedStyle(document.querySelector("#all-outcomes-hour rect.ink-ok")).fill`); fill != "rgb(63, 185, 80)" {
			t.Errorf("the dark theme's delivered bars are %s", fill)
		}
		br.shot(t, "dashboard-dark")
		br.dark(t, false)
	})

	t.Run("target page", func(t *testing.T) {
		br.open(t, "/ui/targets/billing")
		br.charts(t, 6)
		if got := eval[string](t, br, `document.querySelector("#target-classes-hour desc").textContent`); !strings.Contains(got, "4xx 1") || !strings.Contains(got, "5xx 2") {
			t.Errorf("the answers by status read %q", got)
		}
		br.shot(t, "target")
		br.dark(t, true)
		br.shot(t, "target-dark")
		br.dark(t, false)
	})

	t.Run("filtered list", func(t *testing.T) {
		br.open(t, "/ui/messages")
		br.shot(t, "messages")
		br.load(t, chromedp.Click(chromedp.CSS("#f-duplicate")), chromedp.Click(chromedp.CSS("form.filters button[type=submit]")))
		if got := eval[string](t, br, `location.search`); !strings.Contains(got, "possible_duplicate=true") {
			t.Errorf("the filter's query is %q", got)
		}
		if n := eval[int](t, br, `document.querySelectorAll("#messages tbody tr").length`); n != sc.duplicates {
			t.Errorf("%d possible duplicates listed, want %d", n, sc.duplicates)
		}
		if got := br.text(t, "#messages tbody tr"); !strings.Contains(got, "Possible duplicate") {
			t.Errorf("the possible duplicate reads %q", got)
		}
		br.open(t, "/ui/messages")
		br.do(t, chromedp.SetValue(chromedp.CSS("#f-status"), "error"), chromedp.SendKeys(chromedp.CSS("#f-source"), "erp"))
		br.load(t, chromedp.Click(chromedp.CSS("form.filters button[type=submit]")))
		if got := eval[string](t, br, `location.search`); !strings.Contains(got, "status=error") || !strings.Contains(got, "source=erp") {
			t.Errorf("the filter's query is %q", got)
		}
		if n := eval[int](t, br, `document.querySelectorAll("#messages tbody tr").length`); n != sc.errors {
			t.Errorf("%d messages in error listed, want %d", n, sc.errors)
		}
		br.shot(t, "messages-filtered")
	})

	t.Run("message page", func(t *testing.T) {
		br.load(t, chromedp.Click(chromedp.CSS(`#messages tbody a`)))
		if got := eval[string](t, br, `location.pathname`); got != msg {
			t.Fatalf("the list's link leads to %s", got)
		}
		row := "#delivery-" + sc.billing.ID.String()
		if got := br.text(t, row); !strings.Contains(got, "Failed") || !strings.Contains(got, "unknown customer ACME") {
			t.Errorf("the billing delivery reads %q", got)
		}
		if got := br.text(t, "pre.payload"); !strings.Contains(got, `"customer": "ACME <purchasing@acme.example>"`) {
			t.Errorf("the payload reads %q", got)
		}
		br.shot(t, "message")
		if got := eval[string](t, br, `document.querySelector("#timeline-desc").textContent`); !strings.HasPrefix(got, "8 events over 1m0s from the ingest; 3 attempts") {
			t.Errorf("the timeline reads %q", got)
		}
		if n := eval[int](t, br, `document.querySelectorAll(".timeline rect").length`); n != 3 {
			t.Errorf("the timeline has %d attempts, want 3", n)
		}
		br.do(t, chromedp.Click(chromedp.CSS(".timeline summary")))
		if got := br.text(t, ".timeline ol"); !strings.Contains(got, "billing: attempt 2: failed: 400 Bad Request") {
			t.Errorf("the timeline's text reads %q", got)
		}
		br.shot(t, "message-timeline")
		br.dark(t, true)
		br.shot(t, "message-timeline-dark")
		br.dark(t, false)
	})

	t.Run("action with its confirmation", func(t *testing.T) {
		br.load(t, chromedp.Click(chromedp.CSS(`a[aria-label="Redeliver to billing"]`)))
		if got := br.text(t, "h1"); got != "Redeliver message "+sc.failed.ID.String()+" to billing?" {
			t.Errorf("the confirmation asks %q", got)
		}
		br.shot(t, "confirm")
		// The confirming button has the focus: Enter does it.
		br.focus(t, "Redeliver")
		br.load(t, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, ".notice"); got != "The delivery to billing is queued again." {
			t.Errorf("the notice reads %q", got)
		}
		if got := br.text(t, "#delivery-"+sc.billing.ID.String()); !strings.Contains(got, "Queued") {
			t.Errorf("after the redelivery the row reads %q", got)
		}
	})

	t.Run("live history", func(t *testing.T) {
		// The worker delivers while the page is open; the page's stream
		// continues from the version the page showed, so the events
		// arrive whether it has connected yet or not.
		b.clock.Advance(lifecycle.DispatchBackoff(1))
		m := b.settle(t, sc.billing.ID, lifecycle.Delivered("202 Accepted"))
		row := "#delivery-" + sc.billing.ID.String()
		br.do(t, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf("#event-%d", m.Version))))
		if got := br.text(t, row); !strings.Contains(got, "Delivered") {
			t.Errorf("after the delivery the row reads %q", got)
		}
		if got := br.text(t, "#summary dd"); !strings.Contains(got, "Delivered") {
			t.Errorf("after the delivery the status reads %q", got)
		}
		if got := br.text(t, fmt.Sprintf("#event-%d", m.Version)); !strings.Contains(got, "202 Accepted") {
			t.Errorf("the new event reads %q", got)
		}
		// The row offers what applies now.
		br.do(t, chromedp.WaitVisible(chromedp.CSS(`a[aria-label="Send again to billing"]`)))
	})

	t.Run("live updates paused", func(t *testing.T) {
		// A sign-in may follow one page live: the page a second tab
		// opens says its live updates are paused, and why.
		b.setCaps(t, 256, 1)
		defer b.setCaps(t, 256, 4)
		ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
		defer cancel()
		// The first tab's stream is open before the second asks.
		if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `document.addEventListener("htmx:sseOpen", () => { window.waybillLive = true })`}); err != nil {
			t.Fatal(err)
		}
		br.open(t, msg)
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.waybillLive === true`)); err != nil {
			t.Fatalf("the first tab's stream: %v", err)
		}
		// The second tab's stream is refused: its errors are its own.
		tab, closeTab := chromedp.NewContext(br.ctx)
		defer closeTab()
		tctx, tcancel := context.WithTimeout(tab, 30*time.Second)
		defer tcancel()
		if _, err := chromedp.Run(tctx, chromedp.Navigate(br.base+msg)); err != nil {
			t.Fatal(err)
		}
		status, err := chromedp.Run(tctx, chromedp.Poll[string](`(t => t.includes("paused") && t)(document.querySelector("#live-status").textContent)`))
		if err != nil {
			t.Fatalf("the second tab's status: %v", err)
		}
		if !strings.Contains(status, "Live updates paused: this session follows as many pages live as the setting "+
			"console.max_streams_per_session allows (1)") {
			t.Errorf("the second tab's status reads %q", status)
		}
		if got := br.text(t, "#live-status"); !strings.Contains(got, "followed live") {
			t.Errorf("the first tab's status reads %q", got)
		}
	})

	t.Run("resend", func(t *testing.T) {
		// Billing has the message now, archive had it already: the
		// operator sends it to billing alone once more.
		br.open(t, msg)
		br.load(t, chromedp.Click(chromedp.CSS(`a[href="`+msg+`/resend"]`)))
		if got := br.text(t, "h1"); got != "Send message "+sc.failed.ID.String()+" again?" {
			t.Errorf("the confirmation asks %q", got)
		}
		if n := eval[int](t, br, `document.querySelectorAll("input[name=targets]:checked").length`); n != 2 {
			t.Errorf("%d targets chosen at first, want both", n)
		}
		br.do(t, chromedp.Click(chromedp.CSS(`input[name=targets][value=archive]`)),
			chromedp.SendKeys(chromedp.CSS("#reason"), "billing lost invoice 4711 on their side"))
		br.shot(t, "resend")
		br.load(t, chromedp.SendKeys(chromedp.CSS("#reason"), kb.Enter))
		if got := br.text(t, ".notice"); got != "Sent again as generation 2, to billing." {
			t.Errorf("the notice reads %q", got)
		}
		// The new generation first; the earlier one after it, greyed.
		if got := eval[[]string](t, br, `[...document.querySelectorAll("#deliveries tbody tr")].map(r =>
			r.querySelector("[data-label=Generation]").textContent + " " + r.querySelector("[data-label=Target]").textContent + " " + r.className)`); fmt.Sprint(got) !=
			"[2 billing  1 archive earlier 1 billing earlier]" {
			t.Errorf("the deliveries read %q", got)
		}
		if fg, muted := eval[string](t, br, `getComputedStyle(document.querySelector("#deliveries tr.earlier td")).color`),
			eval[string](t, br, `getComputedStyle(document.querySelector("dl.facts dt")).color`); fg != muted {
			t.Errorf("an earlier generation's row is %s, not the muted %s", fg, muted)
		}
		br.shot(t, "message-generations")
	})

	t.Run("an action on a message that moved", func(t *testing.T) {
		m, err := projection.Load(b.ctx, b.db, sc.failed.ID)
		if err != nil {
			t.Fatal(err)
		}
		fresh := m.NewestFirst()[0]
		br.load(t, chromedp.Click(chromedp.CSS(`#delivery-`+fresh.ID.String()+` a[aria-label="Skip the delivery to billing"]`)))
		br.focus(t, "Skip")
		// Billing's worker delivers while the operator reads the question.
		b.settle(t, fresh.ID, lifecycle.Delivered("200 OK"))
		br.loadStatus(t, 412, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, ".alert"); !strings.Contains(got, "This message changed since you opened it") {
			t.Errorf("the answer reads %q", got)
		}
		br.focus(t, "Look again at the message")
		br.shot(t, "stale")
		br.load(t, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, "#delivery-"+fresh.ID.String()); !strings.Contains(got, "Delivered") {
			t.Errorf("looked at again, the row reads %q", got)
		}
	})

	t.Run("skip in a lane", func(t *testing.T) {
		// Three changes of one order, in a lane whose head failed, and
		// another order.
		var lane []*projection.Message
		for _, step := range []string{"create", "amend", "cancel"} {
			b.clock.Advance(time.Minute)
			lane = append(lane, b.ingestKeyed(t, "shop", "order-4711", `{"order": 4711, "step": "`+step+`"}`))
		}
		b.ingestKeyed(t, "shop", "order-4712", `{"order": 4712, "step": "create"}`)
		head, next := lane[0], lane[1]
		b.settle(t, head.Deliveries[0].ID, lifecycle.Failed("400 Bad Request: unknown customer for order 4711"))
		b.clock.Advance(5 * time.Minute)

		// A message whose delivery waits behind the head.
		br.open(t, "/ui/messages/"+next.ID.String())
		if got := br.text(t, "#delivery-"+next.Deliveries[0].ID.String()); !strings.Contains(got, "Blocked") {
			t.Errorf("the waiting delivery reads %q", got)
		}
		br.shot(t, "message-blocked")

		// The lanes: the failed head holds order-4711, two wait.
		br.open(t, "/ui/targets/orders/lanes")
		if got := br.text(t, "#lanes tbody tr"); !strings.Contains(got, "order-4711") || !strings.Contains(got, "Failed") ||
			!strings.Contains(got, "2") {
			t.Errorf("the first lane reads %q", got)
		}
		br.shot(t, "lanes")

		// The operator opens the head, skips it with a reason, and the
		// lane moves on.
		br.load(t, chromedp.Click(chromedp.CSS(`#lanes a[aria-label="Message `+head.ID.String()+`, the head of order-4711"]`)))
		br.load(t, chromedp.Click(chromedp.CSS(`a[aria-label="Skip the delivery to orders"]`)))
		if got := br.text(t, "h1"); got != "Skip the delivery of message "+head.ID.String()+" to orders?" {
			t.Errorf("the confirmation asks %q", got)
		}
		br.focus(t, "Skip")
		br.do(t, chromedp.SendKeys(chromedp.CSS("#reason"), "order 4711 was cancelled at the till"))
		br.shot(t, "skip")
		br.load(t, chromedp.SendKeys(chromedp.CSS("#reason"), kb.Enter))
		if got := br.text(t, ".notice"); got != "The delivery to orders is skipped." {
			t.Errorf("the notice reads %q", got)
		}
		if got := br.text(t, "#delivery-"+head.Deliveries[0].ID.String()); !strings.Contains(got, "Skipped") {
			t.Errorf("after the skip the row reads %q", got)
		}
		if got := br.text(t, "#history tr:last-child"); !strings.Contains(got, "order 4711 was cancelled at the till") ||
			!strings.Contains(got, "operator:alice") {
			t.Errorf("the history's last row reads %q", got)
		}
		br.open(t, "/ui/targets/orders/lanes")
		if got := br.text(t, "#lanes tbody tr"); !strings.Contains(got, next.ID.String()) || !strings.Contains(got, "Queued") {
			t.Errorf("after the skip the first lane reads %q", got)
		}
		// The lane's key leads to its messages.
		br.load(t, chromedp.Click(chromedp.CSS(`#lanes a[aria-label="The messages of ordering key order-4711"]`)))
		if n := eval[int](t, br, `document.querySelectorAll("#messages tbody tr").length`); n != len(lane) {
			t.Errorf("%d messages of order-4711 listed, want %d", n, len(lane))
		}
	})

	t.Run("bulk operation", func(t *testing.T) {
		// Skip every message of crm, whose target is disabled: the form,
		// its count, the start, and the progress as the runner takes it.
		br.open(t, "/ui/operations/new")
		br.do(t, chromedp.SetValue(chromedp.CSS("#action"), "skip"), chromedp.SendKeys(chromedp.CSS(`input[name="filter.source"]`), "crm"),
			chromedp.SendKeys(chromedp.CSS("#reason"), "ledger is retired"))
		br.load(t, chromedp.SendKeys(chromedp.CSS("#reason"), kb.Enter))
		if got := br.text(t, "#counted"); got != "It takes 1 message" {
			t.Errorf("the count reads %q", got)
		}
		br.focus(t, "Start: skip 1 message")
		br.shot(t, "operation-new")
		br.load(t, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, "#progress dd"); got != "Running" {
			t.Errorf("the new operation's state reads %q", got)
		}
		r := b.runner(t)
		for {
			res, err := r.Step(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Ended || res.Operation == uuid.Nil {
				break
			}
		}
		// The page follows without a reload.
		br.do(t, chromedp.WaitVisible(chromedp.CSS("#progress .tone-ok")))
		if got := br.text(t, "#progress"); !strings.Contains(got, "1 of 1 taken (100%): 1 acted on, 0 refused") {
			t.Errorf("the finished operation reads %q", got)
		}
		br.shot(t, "operation")
		br.open(t, "/ui/operations")
		br.shot(t, "operations")
	})

	t.Run("other pages", func(t *testing.T) {
		for _, p := range []struct{ path, h1, shot string }{
			{"/ui/targets", "Targets", "targets"},
			{"/ui/targets/billing/edit", "Edit target billing", "target-edit"},
			{"/ui/routes", "Routes", "routes"},
			{"/ui/sources", "Sources", "sources"},
			{"/ui/sources/aodb", "Source aodb", "source"},
			{"/ui/settings", "Settings", "settings"},
		} {
			br.open(t, p.path)
			if got := br.text(t, "h1"); got != p.h1 {
				t.Errorf("%s: %q", p.path, got)
			}
			br.shot(t, p.shot)
		}
	})

	t.Run("add and delete a target", func(t *testing.T) {
		br.open(t, "/ui/targets")
		br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/targets?add=file#add"]`)))
		if got := br.text(t, "#add"); got != "Add a target of kind file" {
			t.Errorf("the form is headed %q", got)
		}
		// A relative directory: refused, the problem under its field.
		br.do(t, chromedp.SendKeys(chromedp.CSS("#name"), "ledger2"), chromedp.SendKeys(chromedp.CSS(`[id="config.dir"]`), "spool"))
		br.loadStatus(t, 400, chromedp.Click(chromedp.CSS(`form[action="/ui/targets"] button[type=submit]`)))
		if got := br.text(t, `[id="config.dir-hint"] strong`); got != `"spool" is not an absolute directory path` {
			t.Errorf("the directory's problem reads %q", got)
		}
		br.do(t, chromedp.SetValue(chromedp.CSS(`[id="config.dir"]`), "/var/spool/ledger2"),
			chromedp.SendKeys(chromedp.CSS(`[id="config.extension"]`), "xml"))
		br.load(t, chromedp.Click(chromedp.CSS(`form[action="/ui/targets"] button[type=submit]`)))
		if got := br.text(t, ".notice"); got != "Target ledger2 added." {
			t.Errorf("the notice reads %q", got)
		}
		if got := br.text(t, "pre.json"); !strings.Contains(got, `"extension": "xml"`) {
			t.Errorf("the configuration reads %q", got)
		}
		// Deleted, after its confirmation.
		br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/targets/ledger2/delete"]`)))
		if got := br.text(t, "h1"); got != "Delete target ledger2?" {
			t.Errorf("the confirmation asks %q", got)
		}
		br.focus(t, "Delete")
		br.load(t, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, ".notice"); got != "Target ledger2 deleted." {
			t.Errorf("the notice reads %q", got)
		}
		// A target a route sends to is refused, as by the API.
		br.open(t, "/ui/targets/ledger/delete")
		br.focus(t, "Delete")
		br.loadStatus(t, 409, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, ".alert"); !strings.Contains(got, "sends to it") {
			t.Errorf("the refusal reads %q", got)
		}
	})

	t.Run("add and delete a source", func(t *testing.T) {
		br.open(t, "/ui/sources")
		br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/sources?add=directory#add"]`)))
		br.do(t, chromedp.SendKeys(chromedp.CSS("#name"), "outbox"),
			chromedp.SendKeys(chromedp.CSS(`[id="config.dir"]`), "/var/spool/outbox"),
			chromedp.SendKeys(chromedp.CSS(`[id="config.from"]`), "globex"),
			chromedp.SetValue(chromedp.CSS(`[id="config.after"]`), "delete"))
		// The receiver is missing: refused, under its field.
		br.loadStatus(t, 400, chromedp.Click(chromedp.CSS(`form[action="/ui/sources"] button[type=submit]`)))
		if got := br.text(t, `[id="config.to-hint"] strong`); got == "" {
			t.Error("no problem under config.to")
		}
		br.do(t, chromedp.SendKeys(chromedp.CSS(`[id="config.to"]`), "acme"))
		br.shot(t, "source-new")
		br.load(t, chromedp.Click(chromedp.CSS(`form[action="/ui/sources"] button[type=submit]`)))
		if got := br.text(t, ".notice"); got != "Source outbox added." {
			t.Errorf("the notice reads %q", got)
		}
		if got := br.text(t, "pre.json"); !strings.Contains(got, `"after": "delete"`) || !strings.Contains(got, `"to": "acme"`) {
			t.Errorf("the configuration reads %q", got)
		}
		br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/sources/outbox/delete"]`)))
		br.focus(t, "Delete")
		br.load(t, chromedp.KeyEvent(kb.Enter))
		if got := br.text(t, ".notice"); got != "Source outbox deleted." {
			t.Errorf("the notice reads %q", got)
		}
	})

	t.Run("400 pixels wide", func(t *testing.T) {
		br.do(t, chromedp.EmulateViewport(400, 860))
		br.open(t, "/ui/operations")
		operation := eval[string](t, br, `document.querySelector('main a[href^="/ui/operations/"]:not([href="/ui/operations/new"])')?.getAttribute("href") ?? ""`)
		if operation == "" {
			t.Fatal("no operation listed")
		}
		for _, p := range []struct{ path, shot string }{{"/ui/", "dashboard-400"}, {"/ui/messages", ""}, {msg, "message-400"},
			{"/ui/targets", "targets-400"}, {"/ui/targets/billing", ""}, {"/ui/targets/orders/lanes", ""}, {"/ui/targets?add=http", ""},
			{"/ui/sources", ""}, {"/ui/sources/aodb", ""}, {"/ui/sources?add=inbox_table", ""}, {"/ui/routes", ""},
			{"/ui/operations", ""}, {operation, ""}, {"/ui/operations/new", ""}, {"/ui/try", ""}, {"/ui/tokens", ""}, {"/ui/settings", ""}} {
			br.open(t, p.path)
			// A card names each of its lines: every cell but a row's first
			// has its column's name.
			if unlabelled := eval[[]string](t, br, `[...document.querySelectorAll("tbody td:not(:first-child):not([data-label])")]
				.map(td => (td.closest("table").id || td.closest("table").getAttribute("aria-labelledby") || "a table") + ": " + td.textContent.trim())`); len(unlabelled) > 0 {
				t.Errorf("%s: cells without a data-label: %v", p.path, unlabelled)
			}
			// Neither the page nor a table is wider than the window: every
			// table is a list of blocks, none scrolls in its box.
			if w, c := eval[int](t, br, `document.documentElement.scrollWidth`), eval[int](t, br, `document.documentElement.clientWidth`); w > c {
				t.Errorf("%s is %d pixels wide in a window of %d", p.path, w, c)
			}
			if cut := eval[[]string](t, br, `[...document.querySelectorAll("table")].filter(t =>
				t.scrollWidth > t.parentElement.clientWidth || t.getBoundingClientRect().right > document.documentElement.clientWidth)
				.map(t => (t.id || t.getAttribute("aria-labelledby") || "a table") + " is " + t.scrollWidth + " wide in " + t.parentElement.clientWidth)`); len(cut) > 0 {
				t.Errorf("%s at 400 pixels: %v", p.path, cut)
			}
			if p.shot != "" {
				br.shot(t, p.shot)
			}
		}
		br.do(t, chromedp.EmulateViewport(1280, 900))
	})

	t.Run("reader sees no action", func(t *testing.T) {
		br.load(t, chromedp.Click(chromedp.CSS(`header.bar button[type=submit]`)))
		br.do(t, chromedp.SendKeys(chromedp.CSS("#token"), b.reader))
		br.load(t, chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter))
		br.open(t, msg)
		if n := eval[int](t, br, `document.querySelectorAll("main .button, main form[method=post]").length`); n != 0 {
			t.Errorf("a reader sees %d actions", n)
		}
		if got := br.text(t, "header.bar .who"); !strings.Contains(got, "rita (reader)") {
			t.Errorf("the bar reads %q", got)
		}
	})
}
