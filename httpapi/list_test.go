package httpapi_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// page reads the whole list of query, limit items a page, and returns the
// ids in the order given.
func (b *bundle) page(t *testing.T, query url.Values, limit int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	query.Set("limit", strconv.Itoa(limit))
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("the cursor never ends")
		}
		var list httpapi.MessageList
		b.as(t, readerToken, http.MethodGet, "/messages?"+query.Encode(), nil).want(t, http.StatusOK, &list)
		if len(list.Items) > limit || list.NextCursor != nil && len(list.Items) != limit {
			t.Fatalf("page of %d with limit %d, next %v", len(list.Items), limit, list.NextCursor)
		}
		for _, m := range list.Items {
			ids = append(ids, m.ID)
		}
		if list.NextCursor == nil {
			return ids
		}
		query.Set("cursor", *list.NextCursor)
	}
}

// newest is what the list must give: the ids of the messages matching the
// condition, by (created_at, id) descending.
func (b *bundle) newest(t *testing.T, where string, args ...any) []uuid.UUID {
	t.Helper()
	rows, err := b.db.Query(b.ctx, `SELECT id FROM messages m WHERE `+where+` ORDER BY created_at DESC, id DESC`, args...)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestListPagesWithoutGapsOrRepeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	// Runs of messages with one created_at each, as the frozen clock
	// gives: the id must break the ties.
	for _, run := range []int{7, 3, 5} {
		for range run {
			if _, _, err := b.w.Ingest(b.ctx, newMessage()); err != nil {
				t.Fatal(err)
			}
		}
		b.clock.Advance(time.Second)
	}
	want := b.newest(t, "true")
	if len(want) != 15 {
		t.Fatalf("%d messages", len(want))
	}
	for _, limit := range []int{1, 3, 7, 15, 50} {
		if got := b.page(t, url.Values{}, limit); !slices.Equal(got, want) {
			t.Errorf("limit %d: pages give %v, want %v", limit, got, want)
		}
	}

	// Messages that arrive while a client pages are newer than its cursor:
	// the pages it still reads are exactly the rest.
	var first httpapi.MessageList
	b.as(t, readerToken, http.MethodGet, "/messages?limit=4", nil).want(t, http.StatusOK, &first)
	if _, _, err := b.w.Ingest(b.ctx, newMessage()); err != nil {
		t.Fatal(err)
	}
	rest := b.page(t, url.Values{"cursor": {*first.NextCursor}}, 4)
	if !slices.Equal(rest, want[4:]) {
		t.Errorf("after a new message the rest is %v, want %v", rest, want[4:])
	}
	// The items carry their deliveries.
	if len(first.Items[0].Deliveries) != 1 || first.Items[0].Deliveries[0].Target != "billing" {
		t.Errorf("item %+v", first.Items[0])
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.target(t, "archive", nil)
	// archive gets only acme's messages: replace its route.
	var routes httpapi.RouteList
	b.admin(t, http.MethodGet, "/routes", nil).want(t, http.StatusOK, &routes)
	b.admin(t, http.MethodPut, "/routes/"+routes.Items[1].ID.String(),
		httpapi.RouteRequest{Source: "erp", From: "acme", To: "*", Target: "archive"}).want(t, http.StatusOK, nil)

	ingest := func(source, from string) {
		t.Helper()
		if _, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: source, From: from, To: "globex", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// Accepted first and dispatched last: its deliveries are the newest,
	// its message the oldest, and the lists go by the message.
	early, _, err := b.w.Accept(b.ctx, commands.NewMessage{Source: "erp", From: "acme", To: "globex", Payload: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ingest("erp", "acme")
		ingest("erp", "initech")
		ingest("crm", "acme")
		b.clock.Advance(time.Hour)
	}
	if _, err := b.w.Dispatch(b.ctx, early.ID, "operator:admin"); err != nil {
		t.Fatal(err)
	}
	// One failed message.
	failedMsg, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "initech", To: "globex", Payload: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	b.fail(t, failedMsg.Deliveries[0].ID)

	for _, tc := range []struct {
		query url.Values
		where string
		args  []any
	}{
		{url.Values{"status": {"not_routed"}}, "status = 'not_routed'", nil},
		{url.Values{"status": {"in_progress"}}, "status = 'in_progress'", nil},
		{url.Values{"status": {"error"}}, "status = 'error'", nil},
		{url.Values{"status": {"delivered"}}, "false", nil},
		{url.Values{"source": {"crm"}}, "source = 'crm'", nil},
		{url.Values{"target": {"archive"}}, "from_party = 'acme' AND source = 'erp'", nil},
		{url.Values{"target": {"billing"}, "status": {"in_progress"}}, "source = 'erp' AND status = 'in_progress'", nil},
		{url.Values{"target": {"archive"}, "created_after": {start.Add(30 * time.Minute).Format(time.RFC3339)}},
			"from_party = 'acme' AND source = 'erp' AND created_at > $1", []any{start.Add(30 * time.Minute)}},
		{url.Values{"target": {"nowhere"}}, "false", nil},
		{url.Values{"created_after": {start.Add(30 * time.Minute).Format(time.RFC3339)}}, "created_at > $1", []any{start.Add(30 * time.Minute)}},
		{url.Values{"created_before": {start.Add(time.Hour).Format(time.RFC3339)}}, "created_at < $1", []any{start.Add(time.Hour)}},
		{url.Values{"created_after": {"2026-12-01T09:00:00+01:00"}, "created_before": {"2026-12-01T10:00:00+01:00"}, "source": {"erp"}},
			"created_at > $1 AND created_at < $2 AND source = 'erp'", []any{start, start.Add(time.Hour)}},
	} {
		want := b.newest(t, tc.where, tc.args...)
		if got := b.page(t, tc.query, 2); !slices.Equal(got, want) {
			t.Errorf("%v: got %v, want %v", tc.query, got, want)
		}
	}
	// An unescaped '+' of an offset arrives as a space, and is taken back.
	var list httpapi.MessageList
	b.as(t, readerToken, http.MethodGet, "/messages?created_after=2026-12-01T10:30:00+01:00", nil).want(t, http.StatusOK, &list)
	if want := b.newest(t, "created_at > $1", start.Add(90*time.Minute)); len(list.Items) != len(want) {
		t.Errorf("%d items, want %d", len(list.Items), len(want))
	}

	e := b.as(t, readerToken, http.MethodGet, "/messages?status=failed", nil).fails(t, http.StatusBadRequest, httpapi.CodeInvalidStatus)
	if e.Details.Field != "status" || e.Details.Value != "failed" || !slices.Equal(e.Details.Allowed, lifecycle.Strings(lifecycle.MessageStatuses)) {
		t.Errorf("INVALID_STATUS details %+v", e.Details)
	}
	for query, field := range map[string]string{
		"limit=0": "limit", "limit=501": "limit", "limit=ten": "limit", "cursor=bm9wZQ": "cursor", "cursor=%%%": "query",
		"created_after=yesterday": "created_after", "source=ERP": "source", "target=a%20b": "target",
		"stauts=error": "stauts", "status=error&status=stalled": "status",
		"possible_duplicate=1": "possible_duplicate", "possible_duplicate=false": "possible_duplicate",
	} {
		b.as(t, readerToken, http.MethodGet, "/messages?"+query, nil).invalidField(t, field)
	}
}

// TestListTextFilters: a text filter of the list (a party, an ordering or
// idempotency key) that is not UTF-8 or holds a control character is 400
// naming its parameter, never the database's refusal of it; any UTF-8
// text without one is a filter.
func TestListTextFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{Source: "erp", From: "zürich", To: "globex", IdempotencyKey: "k\uFFFDzzz",
		OrderingKey: "customer-7"})
	for _, param := range []string{"from", "to", "ordering_key", "idempotency_key"} {
		for _, v := range []string{"%FF", "a%00", "a%C3", "a%0Ab", "%7F"} {
			b.as(t, readerToken, http.MethodGet, "/messages?"+param+"="+v, nil).invalidField(t, param)
		}
	}
	for _, query := range []string{"from=z%C3%BCrich", "to=globex", "ordering_key=customer-7", "idempotency_key=k%EF%BF%BDzzz"} {
		var list httpapi.MessageList
		b.as(t, readerToken, http.MethodGet, "/messages?"+query, nil).want(t, http.StatusOK, &list)
		if len(list.Items) != 1 || list.Items[0].ID != m.ID {
			t.Errorf("%s: listed %+v", query, list.Items)
		}
	}
}

// TestHandMadeCursors: a cursor no list hands out is 400 on cursor in
// every list, never the database's refusal of a key, time or place it
// cannot hold, nor a page from elsewhere; the bounds of what a list could
// hand out are cursors still.
func TestHandMadeCursors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", map[string]any{"ordering": map[string]string{"mode": "fifo"}})
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	id := uuid.NewString()
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, path := range []string{
		"/targets/billing/lanes?cursor=AA", // a NUL
		"/targets/billing/lanes?cursor=_w", // 0xff
		"/targets/billing/lanes?cursor=" + cursor("k\x01"),
		"/targets/billing/lanes?cursor=" + cursor(strings.Repeat("k", 201)),
		"/operations/" + id + "/refusals?cursor=99999999999.1",
		"/operations/" + id + "/refusals?cursor=2147483648.1",
		"/messages?cursor=" + cursor("m1:-9000000000000000000:"+id),
		"/messages?cursor=" + cursor("m1:-9223372036854775808:"+id),
		"/messages?cursor=" + cursor("m1:253402300800000000:"+id), // 10000-01-01
		"/operations?cursor=" + cursor("o1:-9223372036854775808:"+id),
	} {
		b.admin(t, http.MethodGet, path, nil).invalidField(t, "cursor")
	}
	var list httpapi.MessageList
	b.admin(t, http.MethodGet, "/messages?cursor="+cursor("m1:253402300799999999:"+id), nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].ID != m.ID {
		t.Errorf("after the last microsecond of 9999: %+v", list.Items)
	}
	b.admin(t, http.MethodGet, "/messages?cursor="+cursor("m1:-62135596800000000:"+id), nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 0 {
		t.Errorf("before the year 1: %+v", list.Items)
	}
	b.admin(t, http.MethodGet, "/operations/"+id+"/refusals?cursor=2147483647.1", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodGet, "/targets/billing/lanes?cursor="+cursor("k\u00fc"), nil).want(t, http.StatusOK, nil)
}
