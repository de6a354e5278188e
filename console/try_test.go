package console_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/waybill/waybill/lifecycle"
)

// TestTryItInTheBrowser: the routes page loads the "try it" box, which
// shows, for a pasted message, which routes take it and why the others do
// not, and what each target's transform makes of it, in place, without
// writing anything.
func TestTryItInTheBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "archive")
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config:    json.RawMessage(`{"url":"http://127.0.0.1:9/"}`),
		Transform: `{"payload": {"invoice": message.payload.id}, "path": "/invoices"}`}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing",
		Types: []string{"invoice.*"}, Filter: "message.payload.amount > 1000"}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	br := startBrowser(t, b.srv.URL)
	br.open(t, "/ui/routes")
	br.do(t, chromedp.SendKeys(chromedp.CSS("#token"), b.admin))
	br.load(t, chromedp.SendKeys(chromedp.CSS("#token"), kb.Enter))

	try := func(payload string) {
		t.Helper()
		br.do(t, chromedp.WaitVisible(chromedp.CSS("#try form")),
			chromedp.SetValue(chromedp.CSS("#try-source"), "erp"),
			chromedp.SetValue(chromedp.CSS("#try-type"), "invoice.paid"),
			chromedp.SetValue(chromedp.CSS("#try-payload"), payload),
			chromedp.Evaluate[chromedp.Void](`document.querySelector("#try-result").textContent = ""`),
			chromedp.Click(chromedp.CSS("#try button[type=submit]")),
			chromedp.WaitVisible(chromedp.CSS("#try-result h3")))
	}
	try(`{"id": "in-1", "amount": 1500}`)
	if got := br.text(t, `#try-result li[data-target="billing"]`); !strings.Contains(got, "shaped by its transform; path /invoices") ||
		!strings.Contains(got, `{"invoice":"in-1"}`) {
		t.Errorf("billing: %q", got)
	}
	if got := br.text(t, `#try-result li[data-target="archive"]`); !strings.Contains(got, "sent as it is") {
		t.Errorf("archive: %q", got)
	}
	if got := eval[string](t, br, `location.pathname`); got != "/ui/routes" {
		t.Errorf("the box left the page for %s", got)
	}
	try(`{"id": "in-2", "amount": 5}`)
	if got := br.text(t, "#try-result tbody"); !strings.Contains(got, "no: its filter yields false") {
		t.Errorf("the routes' verdicts: %q", got)
	}
	try(`{"id": "in-3"}`)
	if got := br.text(t, "#try-result tbody"); !strings.Contains(got, "no: its filter failed: no such key: amount") {
		t.Errorf("the routes' verdicts: %q", got)
	}
	var n int
	if err := b.db.QueryRow(b.ctx, `SELECT count(*) FROM messages`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d messages written, %v", n, err)
	}
}
