package console_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/waybill/waybill/internal/dbtest"
)

// TestRebuildInTheBrowser starts an online rebuild from the settings'
// link, through its confirmation, and follows it on its page without a
// reload to its end: the phase, the events folded of the snapshot's, the
// catch-up, the switch's lock and the audit's result. The tables it
// switched in pass the audit.
func TestRebuildInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	for i := range 20 {
		b.ingest(t, fmt.Sprint("order ", i))
	}
	br := startBrowser(t, b.srv.URL)
	br.open(t, "/ui/signin")
	br.do(t, chromedp.SendKeys(chromedp.CSS("#token"), b.admin))
	br.load(t, chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter))
	br.open(t, "/ui/settings")
	br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/rebuild"]`)))
	if got := br.text(t, "main"); !strings.Contains(got, "This server has started none") {
		t.Errorf("the page before a rebuild reads %q", got)
	}
	br.load(t, chromedp.Click(chromedp.CSS(`a[href="/ui/rebuild/start"]`)))
	if got := br.text(t, "h1"); got != "Rebuild the projections online?" {
		t.Errorf("the confirmation asks %q", got)
	}
	if got := br.text(t, "main"); !strings.Contains(got, "locked for a moment (commands wait, they do not fail)") ||
		!strings.Contains(got, "Servers of another build stop writing from the switch on") {
		t.Errorf("the confirmation says %q", got)
	}
	br.focus(t, "Start the online rebuild")
	br.shot(t, "rebuild-confirm")
	br.load(t, chromedp.KeyEvent(kb.Enter))
	if got := br.text(t, ".notice"); !strings.HasPrefix(got, "Online rebuild ") || !strings.HasSuffix(got, " started.") {
		t.Errorf("the notice reads %q", got)
	}
	// The page follows without a reload: the marker stays.
	eval[bool](t, br, `window.stayed = true`)
	br.do(t, chromedp.WaitVisible(chromedp.CSS("#rebuild-progress .tone-ok")))
	if !eval[bool](t, br, `window.stayed === true`) {
		t.Error("the page reloaded")
	}
	for sel, want := range map[string]string{
		"#rebuild-phase":  "done",
		"#rebuild-events": "of ",
		"#rebuild-lock":   "the live tables were locked for ",
		"#rebuild-result": "the audit of the new tables found 0 violations",
	} {
		if got := br.text(t, sel); !strings.Contains(got, want) {
			t.Errorf("%s reads %q, want %q in it", sel, got, want)
		}
	}
	if n := eval[int](t, br, `document.querySelectorAll('a[href="/ui/rebuild/start"]').length`); n != 1 {
		t.Errorf("%d links to start another once it ended", n)
	}
	br.shot(t, "rebuild")
	dbtest.Audit(t, b.db)
}
