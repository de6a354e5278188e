package console_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

func TestRedeliverAsksThenActs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	d := m.Deliveries[0]
	b.settle(t, d.ID, lifecycle.Failed("400 Bad Request"))
	c := b.signedIn(t, b.admin)

	page := "/ui/messages/" + m.ID.String()
	action := page + "/deliveries/" + d.ID.String() + "/redeliver"
	c.get(t, page).want(t, http.StatusOK).has(t, `href="`+action+`"`, `aria-label="Redeliver to billing"`)
	before := b.journalLength(t)
	c.get(t, action).want(t, http.StatusOK).has(t, "Redeliver message "+m.ID.String()+" to billing?", "is failed after 1 attempt.")
	if b.journalLength(t) != before {
		t.Fatal("asking changed the journal")
	}
	c.post(t, action, nil).redirects(t, page)
	got, err := projection.Load(b.ctx, b.db, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Deliveries[0].State != lifecycle.StateQueued {
		t.Fatalf("delivery %s after the redelivery", got.Deliveries[0].State)
	}
	c.get(t, page).want(t, http.StatusOK).has(t, "The delivery to billing is queued again.", "operator:alice", "delivery.redelivered")
	// The notice shows once.
	c.get(t, page).lacks(t, "The delivery to billing is queued again.")

	// Queued, it is refused with the API's reason, and nothing changes.
	c.get(t, action).want(t, http.StatusOK)
	before = b.journalLength(t)
	a := c.post(t, action, nil).want(t, http.StatusConflict)
	_, err = b.w.Redeliver(b.ctx, m.ID, d.ID, commands.Action{Operator: "alice"})
	var state *commands.StateError
	if !errors.As(err, &state) {
		t.Fatalf("the Writer's answer %v", err)
	}
	_, body := httpapi.Refusal(err)
	a.has(t, html.EscapeString(body.Message), `role="alert"`)
	if b.journalLength(t) != before {
		t.Error("a refused action changed the journal")
	}

	// A delivered delivery is sent again, behind a stronger confirmation.
	b.clock.Advance(lifecycle.DispatchBackoff(1))
	b.settle(t, d.ID, lifecycle.Delivered("200 OK"))
	c.get(t, page).has(t, `aria-label="Send again to billing"`)
	c.get(t, action).want(t, http.StatusOK).has(t, "Send message "+m.ID.String()+" again to billing?", `class="danger"`)
	c.post(t, action, nil).redirects(t, page)
}

func TestSkipAsksThenActsAndTheLaneMoves(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fifo(t, "orders")
	var ms []*projection.Message
	for _, payload := range []string{"first", "second", "third"} {
		ms = append(ms, b.ingestKeyed(t, "shop", "order 4711", payload))
	}
	head, next, last := ms[0], ms[1], ms[2]
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + head.ID.String()
	action := page + "/deliveries/" + head.Deliveries[0].ID.String() + "/skip"
	c.get(t, page).want(t, http.StatusOK).has(t, `href="`+action+`"`, `aria-label="Skip the delivery to orders"`)

	// One that waits is taken out of its lane; the confirmation says so.
	waiting := "/ui/messages/" + last.ID.String() + "/deliveries/" + last.Deliveries[0].ID.String() + "/skip"
	c.get(t, "/ui/messages/"+last.ID.String()).has(t, `href="`+waiting+`"`)
	c.get(t, waiting).want(t, http.StatusOK).has(t, "It waits at place 3 of the lane of ordering key &#34;order 4711&#34;")

	before := b.journalLength(t)
	c.get(t, action).want(t, http.StatusOK).has(t,
		"Skip the delivery of message "+head.ID.String()+" to orders?",
		"The delivery to orders is queued before any attempt.",
		"It holds the lane of ordering key &#34;order 4711&#34;: skipping it lets the next delivery of the lane go at once.",
		`name="reason" value=""`, `class="danger" autofocus>Skip</button>`)
	if b.journalLength(t) != before {
		t.Fatal("asking changed the journal")
	}
	c.post(t, action, url.Values{"reason": {" cancelled at the till "}}).redirects(t, page)
	c.get(t, page).want(t, http.StatusOK).has(t, "The delivery to orders is skipped.", "delivery.skipped",
		"skipped by an operator: cancelled at the till", "operator:alice", `<span class="badge tone-neutral">Skipped</span>`)

	// The lane moved: the next is queued and holds it.
	got, err := projection.Load(b.ctx, b.db, next.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Deliveries[0].State != lifecycle.StateQueued {
		t.Errorf("the next of the lane is %s after the skip", got.Deliveries[0].State)
	}
	c.get(t, "/ui/targets/orders/lanes").want(t, http.StatusOK).has(t, `href="/ui/messages/`+next.ID.String()+`"`)

	// Skipped, it is refused with the API's reason, the reason kept in its
	// field, and nothing changes.
	c.get(t, action).want(t, http.StatusOK)
	before = b.journalLength(t)
	a := c.post(t, action, url.Values{"reason": {"again"}}).want(t, http.StatusConflict)
	_, err = b.w.Skip(b.ctx, head.ID, head.Deliveries[0].ID, commands.Action{Operator: "alice"})
	if !errors.Is(err, commands.ErrNotSkippable) {
		t.Fatalf("the Writer's answer %v", err)
	}
	_, body := httpapi.Refusal(err)
	a.has(t, html.EscapeString(body.Message), `role="alert"`, `name="reason" value="again"`)
	if b.journalLength(t) != before {
		t.Error("a refused skip changed the journal")
	}
	// A skipped delivery may be sent again, and may not be skipped.
	c.get(t, page).has(t, `aria-label="Send again to orders"`).lacks(t, `href="`+action+`"`)

	// One awaiting its receipt has been handed over; the confirmation
	// says so.
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	b.settle(t, m.Deliveries[0].ID, lifecycle.AwaitingAck("sent", b.clock.Now().Add(time.Hour)))
	c.get(t, "/ui/messages/"+m.ID.String()+"/deliveries/"+m.Deliveries[0].ID.String()+"/skip").want(t, http.StatusOK).
		has(t, "billing has the message and its receipt is awaited.").lacks(t, "lane")
}

func TestRedispatchAddsWhatTheRoutesNowMatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	b.target(t, "archive")
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + m.ID.String()
	c.get(t, page).has(t, `href="`+page+`/redispatch"`)
	c.get(t, page+"/redispatch").want(t, http.StatusOK).has(t, "Redispatch message "+m.ID.String()+"?", "Its delivery stays as it is.")
	c.post(t, page+"/redispatch", nil).redirects(t, page)
	c.get(t, page).has(t, "Redispatched: 1 new delivery.", "archive")
	c.get(t, page+"/redispatch").want(t, http.StatusOK)
	c.post(t, page+"/redispatch", nil).redirects(t, page)
	c.get(t, page).has(t, "Redispatched: every matched target had a delivery already.")
}

func TestReaderSeesNoActionAndIsRefusedOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	d := m.Deliveries[0]
	b.settle(t, d.ID, lifecycle.Failed("400 Bad Request"))
	b.inbox(t, "aodb")
	routes, err := b.w.Routes(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := "/ui/messages/" + m.ID.String()
	actions := []string{
		msg + "/redispatch",
		msg + "/resend",
		msg + "/replay",
		msg + "/deliveries/" + d.ID.String() + "/redeliver",
		msg + "/deliveries/" + d.ID.String() + "/skip",
		"/ui/targets/billing/edit",
		"/ui/targets/billing/disable",
		"/ui/targets/billing/enable",
		"/ui/targets/billing/delete",
		"/ui/routes/" + routes[0].ID.String() + "/delete",
		"/ui/sources/aodb/edit",
		"/ui/sources/aodb/disable",
		"/ui/sources/aodb/enable",
		"/ui/sources/aodb/delete",
		"/ui/routes",
		"/ui/targets",
		"/ui/sources",
		"/ui/settings",
	}
	pageToo := func(action string) bool {
		return action == "/ui/routes" || action == "/ui/targets" || action == "/ui/sources" || action == "/ui/settings"
	}

	c := b.signedIn(t, b.reader)
	for _, p := range []string{"/ui/", "/ui/messages", msg, "/ui/targets", "/ui/targets/billing", "/ui/targets/billing/lanes",
		"/ui/routes", "/ui/sources", "/ui/sources/aodb", "/ui/settings"} {
		a := c.get(t, p).want(t, http.StatusOK)
		for _, action := range actions {
			a.lacks(t, `action="`+action+`"`)
			if !pageToo(action) { // pages of their own too
				a.lacks(t, `href="`+action+`"`)
			}
		}
		a.lacks(t, "Redeliver", "Redispatch", "Resend", "Replay", ">Skip<", ">Edit<", ">Disable<", ">Delete<", "Add the route",
			"Add the source", "Add a source", "Add the target", "Add a target", `name="delivery.max_dispatches"`, `name="retention.settled_after"`, "s3cret")
	}

	// The server refuses the actions anyway, with the API's reason, and
	// changes nothing.
	before := b.journalLength(t)
	_, body := httpapi.Refusal(httpapi.Forbidden(auth.RoleReader, auth.Administer))
	for _, action := range actions {
		if !pageToo(action) {
			c.get(t, action).want(t, http.StatusForbidden).has(t, "a token of role reader may not administer")
		}
		c.post(t, action, url.Values{"source": {"erp"}, "from": {"*"}, "to": {"*"}, "target": {"billing"},
			"delivery.max_dispatches": {"3"}, "retention.payload_after": {"1h"}, "reason": {"no"}, "name": {"drop"}, "kind": {"directory"},
			"config.dir": {"/in"}, "config.from": {"a"}, "config.to": {"b"}}).want(t, http.StatusForbidden).has(t, body.Message)
	}
	// The forms that add a target or a source are actions too.
	for _, p := range []string{"/ui/targets?add=http", "/ui/sources?add=directory"} {
		c.get(t, p).want(t, http.StatusForbidden).has(t, "a token of role reader may not administer")
	}
	if b.journalLength(t) != before {
		t.Error("a reader's action changed the journal")
	}
}

func TestIngestTokenMayNotRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.ingester)
	c.get(t, "/ui/").want(t, http.StatusForbidden).has(t, "a token of role ingest may not read", "Sign out")
	c.post(t, "/ui/signout", nil).redirects(t, "/ui/signin")
}

func TestFormsNeedTheSessionsToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	c := b.signedIn(t, b.admin)
	before := b.journalLength(t)
	for _, csrf := range []string{"", "not-the-token", strings.Repeat("0", 64)} {
		form := url.Values{"csrf": {csrf}, "delivery.max_dispatches": {"3"}}
		c.post(t, "/ui/settings", form).want(t, http.StatusForbidden).has(t, "not from this session")
		c.post(t, "/ui/messages/"+m.ID.String()+"/redispatch", form).want(t, http.StatusForbidden)
	}
	// Another session's token is no good either.
	other := b.signedIn(t, b.admin)
	other.get(t, "/ui/settings")
	c.post(t, "/ui/settings", url.Values{"csrf": {other.csrf}, "delivery.max_dispatches": {"3"}}).want(t, http.StatusForbidden)
	if b.journalLength(t) != before {
		t.Error("a form without the session's token changed the journal")
	}
}

func TestUnknownIDsAreNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	m := b.ingest(t, "hello")
	c := b.signedIn(t, b.admin)
	for _, p := range []string{
		"/ui/messages/" + "01a23b49-48df-7e79-b764-a846b1a5c90f",
		"/ui/messages/not-an-id",
		"/ui/messages/" + strings.ToUpper(m.ID.String()) + "x",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/payload",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/live",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/live/status",
		"/ui/messages/" + m.ID.String() + "/deliveries/01a23b49-48df-7e79-b764-a846b1a5c90f/redeliver",
		"/ui/messages/" + m.ID.String() + "/deliveries/01a23b49-48df-7e79-b764-a846b1a5c90f/skip",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/deliveries/" + m.Deliveries[0].ID.String() + "/skip",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/redispatch",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/resend",
		"/ui/messages/01a23b49-48df-7e79-b764-a846b1a5c90f/replay",
		"/ui/targets/nope",
		"/ui/targets/Not_A_Name/edit",
		"/ui/targets/nope/lanes",
		"/ui/routes/01a23b49-48df-7e79-b764-a846b1a5c90f/delete",
		"/ui/sources/nope",
		"/ui/sources/nope/edit",
		"/ui/sources/nope/enable",
		"/ui/sources/nope/disable",
		"/ui/sources/Not_A_Name/delete",
		"/ui/nothing/here",
	} {
		c.get(t, p).want(t, http.StatusNotFound).has(t, "<h1>Not found</h1>", "There is nothing here", "retention period", "Sign out")
	}
	c.get(t, "/ui/static/nothing.js").want(t, http.StatusNotFound).has(t, "<h1>Not found</h1>")
}

func TestTargetEditEnableAndDisable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/targets").want(t, http.StatusOK).has(t, `href="/ui/targets/billing/disable"`, "Enabled", "no bound")
	c.get(t, "/ui/targets/billing").want(t, http.StatusOK).has(t, "http://127.0.0.1:9/", `href="/ui/targets/billing/edit"`)

	// Problems are each named, as the API names the fields, and change
	// nothing.
	c.get(t, "/ui/targets/billing/edit").want(t, http.StatusOK).has(t, `name="retry.max_attempts" value="10"`,
		`name="config.url" value="http://127.0.0.1:9/"`, `type="checkbox" id="config.tls_skip_verify"`).lacks(t, `name="config"`)
	form := url.Values{"enabled": {"on"}, "max_concurrent": {"500"}, "attempt_timeout": {"soon"},
		"retry.strategy": {"exponential"}, "retry.jitter": {"2"}, "retry.max_attempts": {"three"}, "config.url": {"ftp://x"}}
	changes := b.changes.Load()
	c.post(t, "/ui/targets/billing/edit", form).want(t, http.StatusBadRequest).
		has(t, "<code>attempt_timeout</code>", "<code>retry.max_attempts</code>", `value="soon"`, `aria-invalid="true"`)
	form.Set("attempt_timeout", "5s")
	form.Set("retry.max_attempts", "3")
	c.post(t, "/ui/targets/billing/edit", form).want(t, http.StatusBadRequest).
		has(t, "<code>max_concurrent</code>", "<code>retry.jitter</code>", "<code>config.url</code>")
	if b.changes.Load() != changes {
		t.Fatal("a refused edit announced a change")
	}

	form = url.Values{"enabled": {"on"}, "max_concurrent": {"7"}, "slots": {"8"}, "attempt_timeout": {"5s"}, "retry.strategy": {"linear"},
		"retry.max_attempts": {"3"}, "receipt.timeout": {"1h"}, "config.url": {"http://127.0.0.1:9/in"}, "config.method": {"PUT"},
		"config.headers": {"X-Tenant: acme\r\nAuthorization: Bearer t0k3n"}, "rate.per_second": {"0"}}
	c.post(t, "/ui/targets/billing/edit", form).want(t, http.StatusBadRequest).has(t, `id="rate.per_second-hint"><strong>`,
		"<code>slots</code>", "at most max_concurrent (7)")
	form.Set("rate.per_second", "2.5")
	form.Set("slots", "6")
	c.post(t, "/ui/targets/billing/edit", form).redirects(t, "/ui/targets/billing")
	c.get(t, "/ui/targets/billing").has(t, "Target billing saved.", "linear", "http://127.0.0.1:9/in", "within 1h0m0s",
		"7, across every process", "6 at once", "2.5 a second, 3 at once over it",
		html.EscapeString(`"X-Tenant": "acme"`), html.EscapeString(`"method": "PUT"`))
	c.get(t, "/ui/targets/billing/edit").has(t, `name="rate.per_second" value="2.5"`, `name="rate.burst" value="3"`, `name="slots" value="6"`)
	c.get(t, "/ui/targets/billing/edit").has(t, `<option value="PUT" selected>`, "Authorization: Bearer t0k3n\nX-Tenant: acme</textarea>",
		`name="enabled_was" value="on"`)
	if b.changes.Load() != changes+1 {
		t.Error("a saved edit did not announce the change")
	}
	// The target is disabled (a 410) while the form is open: a save that
	// leaves the box as it was shown keeps it disabled, one that ticks it
	// again enables it.
	billing := func() lifecycle.Target {
		all, err := b.w.Targets(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range all {
			if tg.Name == "billing" {
				return tg
			}
		}
		t.Fatal("no target billing")
		return lifecycle.Target{}
	}
	gone := billing()
	gone.Enabled = false
	if _, err := b.w.UpdateTarget(b.ctx, gone, "operator:gone"); err != nil {
		t.Fatal(err)
	}
	form.Set("enabled_was", "on")
	c.post(t, "/ui/targets/billing/edit", form).redirects(t, "/ui/targets/billing")
	if billing().Enabled {
		t.Error("a save with the box as it was shown enabled a target disabled meanwhile")
	}
	form.Set("enabled_was", "")
	c.post(t, "/ui/targets/billing/edit", form).redirects(t, "/ui/targets/billing")
	if !billing().Enabled {
		t.Error("a save that ticked the box did not enable the target")
	}

	// The ordering, named as the API names it, each problem under its
	// field in the API's words.
	c.get(t, "/ui/targets/billing/edit").has(t, `<option value="none" selected>`, `<option value="block" selected>`,
		`name="ordering.head_alert_after" value=""`)
	form.Set("ordering.mode", "sideways")
	form.Set("ordering.on_failure", "later")
	form.Set("ordering.head_alert_after", "10ms")
	a := c.post(t, "/ui/targets/billing/edit", form).want(t, http.StatusBadRequest)
	_, body := httpapi.Refusal(fmt.Errorf("%w: %w", commands.ErrInvalid,
		lifecycle.Ordering{Mode: "sideways", OnFailure: "later", HeadAlertAfter: lifecycle.Duration(10 * time.Millisecond)}.Validate()))
	if len(body.Details.Errors) != 3 {
		t.Fatalf("the API's problems %+v", body.Details)
	}
	for _, p := range body.Details.Errors {
		a.has(t, `id="`+p.Field+`-hint"><strong>`+html.EscapeString(p.Problem)+`</strong>`)
	}
	a.has(t, `<select id="ordering.mode" name="ordering.mode" aria-describedby="ordering.mode-hint" aria-invalid="true">`)
	form.Set("ordering.mode", "fifo")
	form.Set("ordering.on_failure", "continue")
	form.Set("ordering.head_alert_after", "5m")
	c.post(t, "/ui/targets/billing/edit", form).redirects(t, "/ui/targets/billing")
	c.get(t, "/ui/targets/billing").has(t, "<code>fifo</code>", "<code>continue</code>", "waiting for 5m0s",
		`href="/ui/targets/billing/lanes"`)
	c.get(t, "/ui/targets/billing/edit").has(t, `<option value="fifo" selected>`, `<option value="continue" selected>`,
		`name="ordering.head_alert_after" value="5m0s"`)
	ts, err := b.w.Targets(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o := ts[0].Ordering; o.Mode != lifecycle.OrderingFIFO || o.OnFailure != lifecycle.OnFailureContinue || o.HeadAlertAfter.D() != 5*time.Minute {
		t.Errorf("ordering after the edit %+v", o)
	}

	c.get(t, "/ui/targets/billing/disable").want(t, http.StatusOK).has(t, "Disable target billing?", "stall")
	c.post(t, "/ui/targets/billing/disable", nil).redirects(t, "/ui/targets/billing")
	if ts, err = b.w.Targets(b.ctx); err != nil {
		t.Fatal(err)
	}
	if ts[0].Enabled || ts[0].MaxConcurrent != 7 || ts[0].Slots != 6 || !ts[0].Ordering.FIFO() {
		t.Errorf("after the disable %+v", ts[0])
	}
	c.get(t, "/ui/targets").has(t, "Target billing is disabled.", `href="/ui/targets/billing/enable"`, "Disabled", "(6 a process)").
		lacks(t, "no bound")
	c.post(t, "/ui/targets/billing/enable", nil).redirects(t, "/ui/targets/billing")
}

func TestTargetAddAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/targets").want(t, http.StatusOK).has(t, "No targets yet", `href="/ui/targets?add=file#add"`,
		`href="/ui/targets?add=http#add"`).lacks(t, `action="/ui/targets"`)
	// The form of a kind has the kind's fields, each on its own, and the
	// defaults of every target.
	c.get(t, "/ui/targets?add=http").want(t, http.StatusOK).has(t, `action="/ui/targets"`, `name="kind" value="http"`,
		`name="config.url"`, `<option value="POST" selected>`, `name="max_concurrent" value=""`, "no bound across the cluster").lacks(t, `name="config.dir"`)
	c.get(t, "/ui/targets?add=file").want(t, http.StatusOK).has(t, `name="config.dir"`, `name="config.extension"`,
		`type="checkbox" id="config.overwrite"`, `name="max_concurrent" value=""`).lacks(t, `name="config.url"`)
	c.get(t, "/ui/targets?add=ftp").want(t, http.StatusBadRequest).has(t, "<code>add</code>", "allowed are file, http")

	// Refused: each problem under its field in the API's words, nothing
	// written.
	before, changes := b.journalLength(t), b.changes.Load()
	form := url.Values{"kind": {"file"}, "name": {"ledger"}, "enabled": {"on"}, "config.dir": {"spool"}, "config.extension": {"j.son"}}
	c.post(t, "/ui/targets", form).want(t, http.StatusBadRequest).
		has(t, `id="config.dir-hint"><strong>&#34;spool&#34; is not an absolute directory path</strong>`,
			`id="config.extension-hint"><strong>&#34;j.son&#34;: must be 1 to 16 letters or digits, without the dot</strong>`,
			`value="spool"`, `name="kind" value="file"`)
	if b.journalLength(t) != before || b.changes.Load() != changes {
		t.Fatal("a refused target changed the journal")
	}
	form.Set("config.dir", "/var/spool/ledger")
	form.Set("config.extension", "")
	form.Set("config.overwrite", "on")
	c.post(t, "/ui/targets", form).redirects(t, "/ui/targets/ledger")
	c.get(t, "/ui/targets/ledger").has(t, "Target ledger added.", html.EscapeString(`"extension": "bin"`), html.EscapeString(`"overwrite": true`))
	b.lastChange(t, "target.created", "operator:alice")
	if b.changes.Load() != changes+1 {
		t.Error("an added target did not announce the change")
	}
	c.post(t, "/ui/targets", form).want(t, http.StatusConflict).has(t, `id="name-hint"><strong>is taken: another target has it</strong>`)

	// Deleted only once no route sends to it, after its confirmation.
	route, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "ledger"}, "operator:setup")
	if err != nil {
		t.Fatal(err)
	}
	before = b.journalLength(t)
	c.get(t, "/ui/targets/ledger/delete").want(t, http.StatusOK).has(t, "Delete target ledger?", `class="danger" autofocus>Delete</button>`)
	c.post(t, "/ui/targets/ledger/delete", nil).want(t, http.StatusConflict).has(t, "route "+route.ID.String()+" sends to it")
	if b.journalLength(t) != before {
		t.Fatal("a refused delete changed the journal")
	}
	if err := b.w.DeleteRoute(b.ctx, route.ID, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	c.post(t, "/ui/targets/ledger/delete", nil).redirects(t, "/ui/targets")
	c.get(t, "/ui/targets").has(t, "Target ledger deleted.", "No targets yet")
	b.lastChange(t, "target.deleted", "operator:alice")
	c.post(t, "/ui/targets/ledger/delete", nil).want(t, http.StatusNotFound)
}

func TestRoutesAddAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/routes").want(t, http.StatusOK).has(t, `<option value="billing"`)
	c.post(t, "/ui/routes", url.Values{"source": {"Bad Source"}, "from": {"*"}, "to": {""}, "target": {"nope"}}).
		want(t, http.StatusBadRequest).has(t, "<code>source</code>", "<code>to</code>", `value="Bad Source"`)
	c.post(t, "/ui/routes", url.Values{"source": {"crm"}, "from": {"*"}, "to": {"*"}, "target": {"nope"}}).
		want(t, http.StatusBadRequest).has(t, "<code>target</code>")
	c.post(t, "/ui/routes", url.Values{"source": {"crm"}, "from": {"acme"}, "to": {"*"}, "target": {"billing"}}).
		redirects(t, "/ui/routes")
	c.get(t, "/ui/routes").has(t, "Route added: from crm (acme → *) to billing.")
	routes, err := b.w.Routes(b.ctx)
	if err != nil || len(routes) != 2 {
		t.Fatalf("routes %+v, %v", routes, err)
	}
	del := fmt.Sprintf("/ui/routes/%s/delete", routes[1].ID)
	c.get(t, del).want(t, http.StatusOK).has(t, "Delete the route from crm (acme → *) to billing?")
	c.post(t, del, nil).redirects(t, "/ui/routes")
	c.get(t, "/ui/routes").has(t, "Route deleted").lacks(t, del)
	c.post(t, del, nil).want(t, http.StatusNotFound)
}

func TestSettingsSaveWhatTheAPITakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/settings").want(t, http.StatusOK).has(t, `value="5"`, `value="200"`)
	form := func(dispatches, rate string) url.Values {
		return url.Values{"delivery.max_dispatches": {dispatches}, "operations.rate": {rate}}
	}
	c.post(t, "/ui/settings", form("21", "200")).want(t, http.StatusBadRequest).
		has(t, "<code>delivery.max_dispatches</code>: must be from 1 to 20, got 21", `value="21"`)
	c.post(t, "/ui/settings", form("x", "200")).want(t, http.StatusBadRequest).
		has(t, "must be a whole number")
	c.post(t, "/ui/settings", form("9", "100001")).want(t, http.StatusBadRequest).
		has(t, "<code>operations.rate</code>", `value="100001"`)
	if s, err := b.w.Settings(b.ctx); err != nil || s.Delivery.MaxDispatches != 5 {
		t.Errorf("a refused form changed the settings: %+v, %v", s, err)
	}
	// What the form does not show stays as it was: the callbacks'
	// attempts and retention; and so does a field it does not send.
	week := lifecycle.Duration(7 * 24 * time.Hour)
	kept := lifecycle.DefaultSettings()
	kept.CallbackMaxAttempts = 3
	kept.Retention = lifecycle.Retention{SettledAfter: &week, FailedAfter: &week, ArchiveDir: t.TempDir()}
	kept.Operations.Rate = 50
	if err := b.w.SetSettings(b.ctx, kept, "operator:test"); err != nil {
		t.Fatal(err)
	}
	c.post(t, "/ui/settings", url.Values{"delivery.max_dispatches": {"9"}}).redirects(t, "/ui/settings")
	s, err := b.w.Settings(b.ctx)
	if err != nil || s.Delivery.MaxDispatches != 9 || s.CallbackMaxAttempts != 3 || s.Retention.String() != kept.Retention.String() ||
		s.Operations.Rate != 50 {
		t.Errorf("settings %+v, %v", s, err)
	}
	c.post(t, "/ui/settings", form("9", "70")).redirects(t, "/ui/settings")
	if s, err := b.w.Settings(b.ctx); err != nil || s.Operations.Rate != 70 {
		t.Errorf("settings %+v, %v", s, err)
	}
}

func TestSettingsRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reader := b.signedIn(t, b.reader)
	reader.get(t, "/ui/settings").want(t, http.StatusOK).has(t, "<dd>never (<code>retention.settled_after</code>)", "<dd>none (<code>retention.archive_dir</code>)")
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/settings").want(t, http.StatusOK).has(t, `name="retention.payload_after" value=""`, `name="retention.archive_dir" value=""`)
	all := func(payload, settled, failed, dir string) url.Values {
		return url.Values{"delivery.max_dispatches": {"5"}, "operations.rate": {"200"}, "retention.payload_after": {payload},
			"retention.settled_after": {settled}, "retention.failed_after": {failed}, "retention.archive_dir": {dir}}
	}

	// Refused as the API refuses it, each problem under its field, and
	// nothing written.
	before := b.journalLength(t)
	a := c.post(t, "/ui/settings", all("soon", "1ms", "1h", "archive")).want(t, http.StatusBadRequest).
		has(t, `value="soon"`, `value="archive"`, `id="retention.payload_after-hint"><strong>`)
	a.has(t, "<code>retention.payload_after</code>")
	c.post(t, "/ui/settings", all("", "168h", "24h", "")).want(t, http.StatusBadRequest).
		has(t, html.EscapeString("retention.failed_after: must not be shorter than retention.settled_after (168h0m0s)")[len("retention.failed_after: "):],
			`id="retention.archive_dir-hint"><strong>is required while retention.settled_after is set`)
	if b.journalLength(t) != before {
		t.Fatal("a refused form changed the journal")
	}

	// Saved: the periods as the API writes them, empty for never.
	dir := t.TempDir()
	c.post(t, "/ui/settings", all(" 24h ", "168h", "", dir)).redirects(t, "/ui/settings")
	b.lastChange(t, "settings.changed", "operator:alice")
	s, err := b.w.Settings(b.ctx)
	if err != nil || s.Retention.String() != "payload after 24h0m0s, settled after 168h0m0s, failed after never, archived in "+dir {
		t.Fatalf("retention %s, %v", s.Retention, err)
	}
	c.get(t, "/ui/settings").has(t, "Settings saved.", `name="retention.payload_after" value="24h0m0s"`,
		`name="retention.settled_after" value="168h0m0s"`, `name="retention.failed_after" value=""`)
	reader.get(t, "/ui/settings").has(t, "<dd>24h0m0s (<code>retention.payload_after</code>)", "<dd>never (<code>retention.failed_after</code>)")

	// A field the form does not send keeps its value; one sent empty is
	// never.
	c.post(t, "/ui/settings", url.Values{"retention.payload_after": {""}}).redirects(t, "/ui/settings")
	if s, err := b.w.Settings(b.ctx); err != nil || s.Retention.PayloadAfter != nil || s.Retention.SettledAfter == nil ||
		s.Retention.ArchiveDir != dir {
		t.Errorf("retention %s, %v", s.Retention, err)
	}
}

// TestHandlerPanicIsInternal: a panic in a console handler answers that
// request with the internal error's page, and the console serves on.
func TestHandlerPanicIsInternal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/targets?add=file").want(t, http.StatusOK)
	b.panicOnChange.Store(true)
	form := url.Values{"kind": {"file"}, "name": {"ledger"}, "enabled": {"on"}, "config.dir": {"/var/spool/ledger"}}
	c.post(t, "/ui/targets", form).want(t, http.StatusInternalServerError).has(t, "internal error")
	b.panicOnChange.Store(false)
	c.get(t, "/ui/targets").want(t, http.StatusOK).has(t, "ledger")
}

// TestSettingsCallbacks: the callbacks' lists are shown, saved as the API
// takes them, and a wrong entry is refused under its field.
func TestSettingsCallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reader := b.signedIn(t, b.reader)
	reader.get(t, "/ui/settings").want(t, http.StatusOK).has(t, "<dd>none (<code>callbacks.allowed_networks</code>)",
		"<dd>any (<code>callbacks.allowed_hosts</code>)")
	c := b.signedIn(t, b.admin)
	c.get(t, "/ui/settings").want(t, http.StatusOK).has(t, `name="callbacks.allowed_networks" value=""`)
	before := b.journalLength(t)
	c.post(t, "/ui/settings", url.Values{"callbacks.allowed_networks": {"10.0.0.1"}}).want(t, http.StatusBadRequest).
		has(t, `value="10.0.0.1"`, `id="callbacks.allowed_networks-hint"><strong>`)
	if b.journalLength(t) != before {
		t.Fatal("a refused form changed the journal")
	}
	c.post(t, "/ui/settings", url.Values{"callbacks.allowed_networks": {"127.0.0.0/8, ::1/128"},
		"callbacks.allowed_hosts": {"*.example.com hooks.example.org"}}).redirects(t, "/ui/settings")
	s, err := b.w.Settings(b.ctx)
	if err != nil || !slices.Equal(s.Callbacks.AllowedNetworks, []string{"127.0.0.0/8", "::1/128"}) ||
		!slices.Equal(s.Callbacks.AllowedHosts, []string{"*.example.com", "hooks.example.org"}) {
		t.Fatalf("settings %+v, %v", s.Callbacks, err)
	}
	c.get(t, "/ui/settings").has(t, `name="callbacks.allowed_networks" value="127.0.0.0/8, ::1/128"`)
	reader.get(t, "/ui/settings").has(t, "<dd>*.example.com, hooks.example.org (<code>callbacks.allowed_hosts</code>)")
	c.post(t, "/ui/settings", url.Values{"callbacks.allowed_networks": {""}}).redirects(t, "/ui/settings")
	if s, err := b.w.Settings(b.ctx); err != nil || len(s.Callbacks.AllowedNetworks) != 0 || len(s.Callbacks.AllowedHosts) != 2 {
		t.Errorf("settings %+v, %v", s.Callbacks, err)
	}
}

// TestDeliverNowAsksThenActs: a scheduled message offers deliver now,
// which asks first, then queues its deliveries.
func TestDeliverNowAsksThenActs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	delay := lifecycle.Duration(time.Hour)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Type: "invoice.created",
		ContentType: "text/plain; charset=utf-8", Payload: []byte("later"), Delay: &delay})
	if err != nil {
		t.Fatal(err)
	}
	c := b.signedIn(t, b.admin)
	page := "/ui/messages/" + m.ID.String()
	c.get(t, page).has(t, `href="`+page+`/deliver-now"`, "Scheduled")
	c.get(t, "/ui/messages?status=scheduled&type=invoice.created").has(t, page)
	c.get(t, "/ui/messages?type=invoice.updated").lacks(t, page)
	c.get(t, page+"/deliver-now").want(t, http.StatusOK).has(t, "Deliver message "+m.ID.String()+" now?")
	c.post(t, page+"/deliver-now", nil).redirects(t, page)
	c.get(t, page).has(t, "Delivered now: its deliveries are queued.", "In progress").lacks(t, `href="`+page+`/deliver-now"`)
}

// TestRouteWithTypesAndFilter: the form takes a route's types and filter,
// refuses a filter that does not compile, and a message's page shows its
// headers and, in its history, which route took it and why.
func TestRouteWithTypesAndFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`)}, "operator:test"); err != nil {
		t.Fatal(err)
	}
	c := b.signedIn(t, b.admin)
	form := func(filter string) url.Values {
		return url.Values{"source": {"erp"}, "from": {"*"}, "to": {"*"}, "target": {"billing"},
			"types": {"invoice.*, order.created"}, "filter": {filter}}
	}
	c.get(t, "/ui/routes").want(t, http.StatusOK).has(t, `name="filter"`, `name="types"`)
	c.post(t, "/ui/routes", form("message.payload.amount >")).want(t, http.StatusBadRequest).
		has(t, "<code>filter</code>", "at 1:25:", `value="invoice.*, order.created"`)
	c.post(t, "/ui/routes", form(`message.headers[?"x-tier"].orValue("") == "gold"`)).redirects(t, "/ui/routes")
	c.get(t, "/ui/routes").has(t, "Route added: from erp (* → *) to billing, types invoice.*, order.created, filter",
		"<td class=\"wrap\" data-label=\"Types\">invoice.*, order.created</td>")
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Type: "invoice.paid",
		ContentType: "text/plain", Payload: []byte("hi"), Headers: map[string]string{"X-Tier": "gold"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Deliveries) != 1 {
		t.Fatalf("deliveries %+v", m.Deliveries)
	}
	c.get(t, "/ui/messages/"+m.ID.String()).want(t, http.StatusOK).has(t, "<dt>Headers</dt>", "<code>x-tier: gold</code>",
		"routed to billing by route ")
}

// TestBreakerBadgeAndCloseByHand: a target whose breaker opened shows it,
// on its page and the dashboard, with how many deliveries it holds; an
// admin closes it by hand, after a confirmation.
func TestBreakerBadgeAndCloseByHand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	breaker := &lifecycle.Breaker{Window: lifecycle.Duration(time.Minute), MinRequests: 1, FailureRate: 1,
		Cooldown: lifecycle.Duration(30 * time.Second), MaxCooldown: lifecycle.Duration(10 * time.Minute)}
	if _, err := b.w.CreateTarget(b.ctx, lifecycle.Target{Name: "billing", Kind: "http", Enabled: true,
		Config: json.RawMessage(`{"url":"http://127.0.0.1:9/"}`), Health: &lifecycle.Health{Breaker: breaker}}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.CreateRoute(b.ctx, lifecycle.Route{Source: "erp", From: "*", To: "*", Target: "billing"}, "operator:setup"); err != nil {
		t.Fatal(err)
	}
	first := b.ingest(t, "fails")
	b.ingest(t, "waits")
	c := b.signedIn(t, b.admin)
	page := "/ui/targets/billing"
	c.get(t, page).has(t, "<dt>Health</dt>", ">Healthy</span>").lacks(t, "/health/close")

	b.settle(t, first.Deliveries[0].ID, lifecycle.Failed("503 Service Unavailable"))
	c.get(t, page).has(t, ">Breaker open</span> until ", "then one probe; ", "1 held", `href="`+page+`/health/close"`)
	c.get(t, "/ui/").has(t, ">Breaker open</span>")
	reader := b.signedIn(t, b.reader)
	reader.get(t, page).has(t, ">Breaker open</span>").lacks(t, "/health/close")
	reader.get(t, page+"/health/close").want(t, http.StatusForbidden)

	c.get(t, page+"/health/close").want(t, http.StatusOK).has(t, "Close the breaker of target billing?")
	c.post(t, page+"/health/close", nil).redirects(t, page)
	c.get(t, page).has(t, "The breaker of target billing is closed.", ">Healthy</span>").lacks(t, "/health/close")
	c.get(t, "/ui/targets/nowhere/health/close").want(t, http.StatusNotFound)
}

// TestHeadIsAGet: a HEAD of a page is answered as its GET, an edit's or
// an action's page among them, and writes nothing, whatever the form.
func TestHeadIsAGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	b.inbox(t, "aodb")
	c := b.signedIn(t, b.admin)
	changes := b.changes.Load()
	for _, path := range []string{"/ui/targets/billing/edit", "/ui/sources/aodb/edit", "/ui/operations/new",
		"/ui/operations/new?action=skip", "/ui/settings", "/ui/targets/billing/disable"} {
		get := c.get(t, path)
		req, err := http.NewRequestWithContext(b.ctx, http.MethodHead, c.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if head := c.do(t, req); head.status != get.status || head.body != "" {
			t.Errorf("HEAD %s: %d, %d bytes; GET: %d", path, head.status, len(head.body), get.status)
		}
	}
	if b.changes.Load() != changes {
		t.Error("a HEAD announced a change")
	}
}
