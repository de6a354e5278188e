package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/bulk"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// runner is a bulk runner of the bundle's process, which the test steps.
func (b *bundle) runner(t *testing.T) *bulk.Runner {
	t.Helper()
	r, err := bulk.New(bulk.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// operationPath finds the operation a page leads to.
var operationPath = regexp.MustCompile(`^/ui/operations/([0-9a-f-]{36})$`)

func TestBulkOperationFromTheListToItsEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	var failed []*projection.Message
	for _, p := range []string{"one", "two", "three"} {
		m := b.ingest(t, p)
		b.settle(t, m.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
		failed = append(failed, m)
	}
	// One delivered: the filter leaves it out.
	ok := b.ingest(t, "four")
	b.settle(t, ok.Deliveries[0].ID, lifecycle.Delivered("200 OK"))
	c := b.signedIn(t, b.admin)

	list := c.get(t, "/ui/messages?status=error&target=billing").want(t, http.StatusOK)
	form := "/ui/operations/new?" + url.Values{"filter.status": {"error"}, "filter.target": {"billing"}}.Encode()
	list.has(t, `href="`+strings.ReplaceAll(form, "&", "&amp;")+`"`)
	// A filter an operation cannot take offers no operation.
	c.get(t, "/ui/messages?status=error&ordering_key=k").lacks(t, "/ui/operations/new")

	// The form comes filled from the list; counting writes nothing.
	c.get(t, form).want(t, http.StatusOK).has(t, `value="error" checked`, `value="billing"`).lacks(t, "It takes")
	before := b.journalLength(t)
	q := url.Values{"action": {"redeliver"}, "filter.status": {"error"}, "filter.target": {"billing"}, "reason": {"billing was down"}}
	counted := c.get(t, "/ui/operations/new?"+q.Encode()).want(t, http.StatusOK).has(t, "It takes 3 messages",
		"would be taken on 3 of them and 0 would be refused", "Start: redeliver 3 messages").lacks(t, "Would be refused")
	for _, m := range failed {
		counted.has(t, `href="/ui/messages/`+m.ID.String()+`"`)
	}
	counted.lacks(t, ok.ID.String())
	if b.journalLength(t) != before {
		t.Fatal("counting changed the journal")
	}

	// Starting it leads to its page, running.
	a := c.post(t, "/ui/operations/new", q).want(t, http.StatusSeeOther)
	m := operationPath.FindStringSubmatch(a.header.Get("Location"))
	if m == nil {
		t.Fatalf("the start led to %q", a.header.Get("Location"))
	}
	id := uuid.MustParse(m[1])
	page := "/ui/operations/" + id.String()
	c.get(t, page).want(t, http.StatusOK).has(t, "Operation started: it takes 3 messages.", "Running", "0 of 3 taken",
		`hx-trigger="every 1s"`, "billing was down", "status Error; a delivery to billing", `href="`+page+`/cancel"`)
	c.get(t, "/ui/operations").want(t, http.StatusOK).has(t, `href="`+page+`"`, "0 of 3")

	// One is redelivered by hand meanwhile: the operation refuses it.
	if _, err := b.w.Redeliver(b.ctx, failed[1].ID, failed[1].Deliveries[0].ID, commands.Action{Operator: "bob"}); err != nil {
		t.Fatal(err)
	}
	// Counted on every message to billing, the form applies the run's
	// rules: the one redelivered and the one delivered would be refused.
	all := url.Values{"action": {"redeliver"}, "filter.target": {"billing"}}
	c.get(t, "/ui/operations/new?"+all.Encode()).want(t, http.StatusOK).has(t, "It takes 4 messages",
		"would be taken on 2 of them and 2 would be refused", "Would be refused, by reason", "NOT_REDELIVERABLE",
		"no delivery of generation 1 to billing is failed or stalled")
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
	done := c.get(t, page).want(t, http.StatusOK).has(t, ">Done<", "3 of 3 taken (100%): 2 acted on, 1 refused",
		`href="/ui/messages/`+failed[1].ID.String()+`"`).lacks(t, `hx-trigger`, page+"/cancel")
	done.has(t, "no delivery of")
	got, err := projection.Load(b.ctx, b.db, failed[0].ID)
	if err != nil || got.Deliveries[0].State != lifecycle.StateQueued {
		t.Fatalf("after the operation: %+v, %v", got, err)
	}
	// An operation that has ended cannot be cancelled.
	c.get(t, page+"/cancel").want(t, http.StatusOK)
	c.post(t, page+"/cancel", nil).want(t, http.StatusConflict).has(t, "role=\"alert\"")
}

func TestBulkOperationFormRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	b.ingest(t, "one")
	c := b.signedIn(t, b.admin)
	before := b.journalLength(t)
	for _, tc := range []struct {
		q    url.Values
		want []string
	}{
		{url.Values{"action": {"redeliver"}}, []string{"<code>filter</code>: must name at least one of"}},
		{url.Values{"action": {"delete"}, "filter.target": {"billing"}}, []string{"<code>action</code>", `aria-invalid="true"`}},
		{url.Values{"action": {"skip"}, "filter.created_after": {"yesterday"}}, []string{"<code>filter.created_after</code>", "is not a time"}},
		{url.Values{"action": {"skip"}, "filter.status": {"lost"}}, []string{"<code>filter.status[0]</code>"}},
	} {
		c.get(t, "/ui/operations/new?"+tc.q.Encode()).want(t, http.StatusBadRequest).has(t, tc.want...).lacks(t, "It takes")
		c.post(t, "/ui/operations/new", tc.q).want(t, http.StatusBadRequest).has(t, tc.want...)
	}
	// A filter that matches nothing is counted, and offers no start.
	c.get(t, "/ui/operations/new?"+url.Values{"action": {"skip"}, "filter.source": {"nowhere"}}.Encode()).
		want(t, http.StatusOK).has(t, "No message matches").lacks(t, "Start:")
	if b.journalLength(t) != before {
		t.Error("a refused or counted form changed the journal")
	}
}

func TestCancelARunningBulkOperation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing")
	for _, p := range []string{"one", "two"} {
		m := b.ingest(t, p)
		b.settle(t, m.Deliveries[0].ID, lifecycle.Failed("400 Bad Request"))
	}
	o, err := b.w.CreateOperation(b.ctx, commands.OperationSpec{Action: lifecycle.ActionRedeliver,
		Filter: lifecycle.OperationFilter{Target: "billing"}}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	page := "/ui/operations/" + o.ID.String()

	// A reader sees it, and no action.
	rc := b.signedIn(t, b.reader)
	rc.get(t, "/ui/operations").want(t, http.StatusOK).has(t, `href="`+page+`"`).lacks(t, "/ui/operations/new")
	rc.get(t, page).want(t, http.StatusOK).has(t, "Running").lacks(t, "/cancel")
	rc.get(t, "/ui/operations/new").want(t, http.StatusForbidden)
	rc.get(t, page+"/cancel").want(t, http.StatusForbidden)

	c := b.signedIn(t, b.admin)
	c.get(t, page+"/cancel").want(t, http.StatusOK).has(t, "Cancel operation "+o.ID.String()+"?", "taken 0 of 2 messages")
	c.post(t, page+"/cancel", url.Values{"reason": {"wrong filter"}}).redirects(t, page)
	c.get(t, page).want(t, http.StatusOK).has(t, "Operation cancelled after 0 of 2 messages.", "Cancelled").lacks(t, "hx-trigger")
	after, err := projection.LoadOperation(b.ctx, b.db, o.ID)
	if err != nil || after.State != lifecycle.OperationCancelled {
		t.Fatalf("after the cancel: %+v, %v", after, err)
	}
	c.get(t, "/ui/operations/"+uuid.NewString()).want(t, http.StatusNotFound)
	c.get(t, page+"?refusals=x").want(t, http.StatusBadRequest)
}
