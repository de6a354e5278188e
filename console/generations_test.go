package console_test

import (
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// TestActionsActOnlyOnTheVersionShown: each action's confirmation carries
// the version of the message it showed, and when the message moves before
// the operator confirms (another operator acts), the action is refused
// with a way back to the message as it is now, and nothing is written.
func TestActionsActOnlyOnTheVersionShown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "archive")
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	archive, billing := m.Deliveries[0], m.Deliveries[1]
	b.settle(t, archive.ID, lifecycle.Delivered("200 OK"))
	m = b.settle(t, billing.ID, lifecycle.Failed("400 Bad Request"))
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + m.ID.String()
	bob := commands.Action{Operator: "bob"}

	for _, tc := range []struct {
		action string
		// move is what another operator does meanwhile.
		move func() (*projection.Message, error)
	}{
		{"/deliveries/" + billing.ID.String() + "/redeliver", func() (*projection.Message, error) { return b.w.Redispatch(b.ctx, m.ID, bob) }},
		{"/deliveries/" + billing.ID.String() + "/skip", func() (*projection.Message, error) { return b.w.Redispatch(b.ctx, m.ID, bob) }},
		{"/redispatch", func() (*projection.Message, error) { return b.w.Redispatch(b.ctx, m.ID, bob) }},
		{"/resend", func() (*projection.Message, error) { return b.w.Resend(b.ctx, m.ID, nil, bob) }},
		{"/replay", func() (*projection.Message, error) { return b.w.Redispatch(b.ctx, m.ID, bob) }},
	} {
		shown, err := projection.Load(b.ctx, b.db, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		c.get(t, page+tc.action).want(t, http.StatusOK).has(t, fmt.Sprintf(`name="version" value="%d"`, shown.Version))
		moved, err := tc.move()
		if err != nil {
			t.Fatal(err)
		}
		before := b.journalLength(t)
		c.post(t, page+tc.action, url.Values{"reason": {"late"}, "targets": {"billing"}}).want(t, http.StatusPreconditionFailed).
			has(t, fmt.Sprintf("This message changed since you opened it (you saw version %d; it is at version %d now): look again. Nothing was done.",
				shown.Version, moved.Version), `<a href="`+page+`" autofocus>Look again at the message</a>`).
			lacks(t, `<form class="fields"`)
		if b.journalLength(t) != before {
			t.Errorf("%s: a stale action changed the journal", tc.action)
		}
		// The message page shows it as it is now.
		c.get(t, page).want(t, http.StatusOK).has(t, fmt.Sprintf("<dt>Version</dt><dd>%d</dd>", moved.Version))
	}

	// Looked at again, it acts.
	action := page + "/redispatch"
	c.get(t, action).want(t, http.StatusOK)
	c.post(t, action, nil).redirects(t, page)

	// A form without the version, or with one that is none, is refused
	// naming the field, and changes nothing.
	before := b.journalLength(t)
	for _, v := range []string{"", "seven", "0", "-3"} {
		c.get(t, action).want(t, http.StatusOK)
		c.post(t, action, url.Values{"version": {v}}).want(t, http.StatusBadRequest).has(t, "<code>version</code>: &#34;"+v+"&#34; is not a version")
	}
	if b.journalLength(t) != before {
		t.Error("a form without a version changed the journal")
	}
}

// TestResendChoosesTargetsAndStartsAGeneration: the message page offers
// resend and replay when the Writer would take them; resend sends to the
// targets chosen of the current generation as the next one, which the
// page lists first, the earlier one after it, superseded where it had
// failed.
func TestResendChoosesTargetsAndStartsAGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "archive")
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	archive, billing := m.Deliveries[0], m.Deliveries[1]
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + m.ID.String()
	resend, replay := page+"/resend", page+"/replay"

	// In hand, it is not offered, and refused with the API's reason.
	c.get(t, page).want(t, http.StatusOK).has(t, "<dt>Generation</dt><dd>1</dd>").lacks(t, `href="`+resend+`"`, `href="`+replay+`"`)
	before := b.journalLength(t)
	for action, do := range map[string]func(commands.Action) (*projection.Message, error){
		resend: func(a commands.Action) (*projection.Message, error) { return b.w.Resend(b.ctx, m.ID, nil, a) },
		replay: func(a commands.Action) (*projection.Message, error) { return b.w.Replay(b.ctx, m.ID, a) },
	} {
		_, err := do(commands.Action{Operator: "alice"})
		if !errors.Is(err, commands.ErrNotResendable) {
			t.Fatalf("the Writer's answer %v", err)
		}
		_, body := httpapi.Refusal(err)
		c.get(t, action).want(t, http.StatusOK)
		c.post(t, action, url.Values{"targets": {"archive", "billing"}}).want(t, http.StatusConflict).has(t, html.EscapeString(body.Message),
			"its delivery to archive is queued: it is sent again once none of its generation 1 is in hand", `role="alert"`)
	}
	if b.journalLength(t) != before {
		t.Error("a refused resend changed the journal")
	}

	b.settle(t, archive.ID, lifecycle.Delivered("200 OK"))
	b.settle(t, billing.ID, lifecycle.Failed("400 Bad Request"))
	c.get(t, page).has(t, `href="`+resend+`"`, `href="`+replay+`"`)
	c.get(t, resend).want(t, http.StatusOK).has(t, "Send message "+m.ID.String()+" again?",
		"It goes out again as generation 2: a new delivery to each target you choose.",
		"Of generation 1, the deliveries that failed or stalled become superseded",
		"<legend>Targets of generation 1</legend>",
		`<input type="checkbox" name="targets" value="archive" checked> archive (delivered)`,
		`<input type="checkbox" name="targets" value="billing" checked> billing (failed)`,
		`name="reason" value=""`, `class="danger" autofocus>Resend</button>`)

	// None chosen is no resend; a target not of the generation is the
	// Writer's refusal. Neither changes anything.
	before = b.journalLength(t)
	c.post(t, resend, url.Values{"reason": {"partner fixed their side"}}).want(t, http.StatusBadRequest).
		has(t, "<code>targets</code>: choose at least one: generation 1 went to archive, billing",
			`value="archive"> archive`, `value="billing"> billing`, `name="reason" value="partner fixed their side"`)
	c.get(t, resend)
	c.post(t, resend, url.Values{"targets": {"ledger"}}).want(t, http.StatusBadRequest).has(t, "<code>targets[0]</code>")
	if b.journalLength(t) != before {
		t.Error("a refused resend changed the journal")
	}

	c.get(t, resend)
	c.post(t, resend, url.Values{"targets": {"billing"}, "reason": {"partner fixed their side"}}).redirects(t, page)
	a := c.get(t, page).want(t, http.StatusOK).has(t, "Sent again as generation 2, to billing.", "<dt>Generation</dt><dd>2",
		"message.resent", "partner fixed their side", "operator:alice",
		"Generation 2 is the current one. The deliveries of earlier generations are listed after it")
	got, err := projection.Load(b.ctx, b.db, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Newest generation first; the earlier one greyed, its failed delivery
	// superseded, its delivered one as it was.
	rows := regexp.MustCompile(`<tr id="delivery-([0-9a-f-]{36})"( class="earlier")?>\s*<td data-label="Target">(\w+)</td>\s*`+
		`<td data-label="State"><span class="badge tone-(\w+)">(\w+)</span></td>\s*<td class="num" data-label="Generation">(\d+)</td>`).
		FindAllStringSubmatch(a.body, -1)
	var listed []string
	for _, r := range rows {
		listed = append(listed, fmt.Sprintf("%s %s %s %s%s", r[6], r[3], r[4], r[5], r[2]))
	}
	want := []string{"2 billing info Queued", "1 archive ok Delivered class=\"earlier\"", "1 billing neutral Superseded class=\"earlier\""}
	if fmt.Sprint(listed) != fmt.Sprint(want) {
		t.Errorf("the deliveries read %q, want %q", listed, want)
	}
	if got.Generation != 2 || len(got.Deliveries) != 3 {
		t.Errorf("after the resend: generation %d, %d deliveries", got.Generation, len(got.Deliveries))
	}
	// The new generation is in hand: neither is offered now. The earlier
	// generation is history: its deliveries offer no action.
	a.lacks(t, `href="`+resend+`"`, `href="`+replay+`"`, `aria-label="Send again to archive"`).
		has(t, `aria-label="Skip the delivery to billing"`)
	// A redispatch adds to the current generation.
	c.get(t, page+"/redispatch").want(t, http.StatusOK).has(t, "every matched target that has no delivery in generation 2, the current one, gets one.")
	// The list shows the current generation's deliveries, and which it is.
	c.get(t, "/ui/messages").want(t, http.StatusOK).has(t, `<div>billing <span class="badge tone-info">Queued</span></div><div class="muted">generation 2</div>`).
		lacks(t, "Superseded", "archive <span")

	// Replay: the routes as they are now decide.
	b.settle(t, got.Deliveries[2].ID, lifecycle.Failed("400 Bad Request"))
	b.target(t, "ledger")
	c.get(t, replay).want(t, http.StatusOK).has(t, "Replay message "+m.ID.String()+"?",
		"It goes out again as generation 3, to the targets the routes match now: they are decided afresh when you confirm",
		"may differ from generation 2&#39;s (billing)", `class="danger" autofocus>Replay</button>`).lacks(t, `type="checkbox"`)
	c.post(t, replay, url.Values{"reason": {"ledger added"}}).redirects(t, page)
	c.get(t, page).has(t, "Replayed as generation 3, to archive, billing, ledger.", "ledger added", "<dt>Generation</dt><dd>3")
}

// TestReplayOfAMessageNoRouteMatched: a message no route matched may be
// replayed, not resent (its generation has no target); a replay that
// matches nothing again is a generation without a delivery, and one
// after a route is added sends to it. A message never dispatched or
// refused is neither.
func TestReplayOfAMessageNoRouteMatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := b.ingest(t, "nobody routes erp yet")
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + m.ID.String()
	replay := page + "/replay"
	c.get(t, page).want(t, http.StatusOK).has(t, `href="`+replay+`"`).lacks(t, `href="`+page+`/resend"`)
	c.get(t, page+"/resend").want(t, http.StatusOK).has(t, "Generation 1 has no target: replay the message")
	c.post(t, page+"/resend", nil).want(t, http.StatusBadRequest).has(t, "choose at least one: generation 1 went to no target")

	c.get(t, replay).has(t, "may differ from generation 1&#39;s (no target)")
	c.post(t, replay, nil).redirects(t, page)
	c.get(t, page).has(t, "Replayed as generation 2: no route matches it now, so it is not routed.",
		"Generation 2 is the current one and has no delivery: no route matched it.")
	b.target(t, "billing")
	c.get(t, replay)
	c.post(t, replay, nil).redirects(t, page)
	c.get(t, page).has(t, "Replayed as generation 3, to billing.")

	refused, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
		ContentType: "text/plain", Payload: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Refuse(b.ctx, refused.ID, lifecycle.RefusalRejected, "a repeat", "source:erp"); err != nil {
		t.Fatal(err)
	}
	page = "/ui/messages/" + refused.ID.String()
	c.get(t, page).want(t, http.StatusOK).lacks(t, `href="`+page+`/replay"`, `href="`+page+`/redispatch"`)
	c.get(t, page+"/replay")
	c.post(t, page+"/replay", nil).want(t, http.StatusConflict).
		has(t, "only a dispatched message is sent again: this one was refused")
}

// TestPossibleDuplicates: a message whose duplicate key an earlier one of
// its source had shows it and links to it; the list marks it, and its
// filter keeps only such messages, as the API's does.
func TestPossibleDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	ingest := func(key string) *projection.Message {
		m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex",
			ContentType: "text/plain", Payload: []byte("order 4711"), DuplicateKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := ingest("ctl-4711")
	b.clock.Advance(1)
	repeat := ingest("ctl-4711")
	b.clock.Advance(1)
	other := ingest("ctl-4712")
	c := b.signedIn(t, b.reader)

	c.get(t, "/ui/messages/"+repeat.ID.String()).want(t, http.StatusOK).has(t,
		"<dt>Duplicate key</dt><dd><code>ctl-4711</code></dd>",
		`<dt>Possible duplicate of</dt><dd><a href="/ui/messages/`+first.ID.String()+`" class="mono">`+first.ID.String()+`</a>`,
		`(an earlier message from erp with the same duplicate key)`)
	c.get(t, "/ui/messages/"+first.ID.String()).want(t, http.StatusOK).has(t, "<dt>Duplicate key</dt>").lacks(t, "Possible duplicate of")

	marker := `<span class="badge tone-neutral">Possible duplicate</span>`
	all := c.get(t, "/ui/messages").want(t, http.StatusOK).has(t, `name="possible_duplicate" value="true">`, other.ID.String())
	if n := regexp.MustCompile(regexp.QuoteMeta(marker)).FindAllStringIndex(all.body, -1); len(n) != 1 {
		t.Errorf("%d messages marked, want 1", len(n))
	}
	c.get(t, "/ui/messages?possible_duplicate=true").want(t, http.StatusOK).
		has(t, `name="possible_duplicate" value="true" checked>`, `href="/ui/messages/`+repeat.ID.String()+`"`, marker).
		lacks(t, `href="/ui/messages/`+first.ID.String()+`"`, `href="/ui/messages/`+other.ID.String()+`"`)
	for _, v := range []string{"false", "yes"} {
		c.get(t, "/ui/messages?possible_duplicate="+v).want(t, http.StatusBadRequest).
			has(t, "<code>possible_duplicate</code>: &#34;"+v+"&#34;: allowed is true").lacks(t, `<table id="messages">`)
	}
}
