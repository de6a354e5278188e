package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// act posts an operator action with If-Match (none when ifMatch is ""),
// v as as sends it.
func (b *bundle) act(t *testing.T, path, ifMatch string, v any) *reply {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if ifMatch != "" {
		h.Set("If-Match", ifMatch)
	}
	var body []byte
	switch v := v.(type) {
	case nil:
	case string:
		body = []byte(v)
	default:
		var err error
		if body, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	return b.sendHeader(t, adminToken, http.MethodPost, path, h, body)
}

// message reads a message and checks its ETag is its version.
func (b *bundle) message(t *testing.T, id uuid.UUID) httpapi.Message {
	t.Helper()
	var m httpapi.Message
	r := b.admin(t, http.MethodGet, "/messages/"+id.String(), nil).want(t, http.StatusOK, &m)
	if got := r.header.Get("ETag"); got != strconv.Quote(strconv.Itoa(m.Version)) {
		t.Fatalf("ETag %q of a message at version %d", got, m.Version)
	}
	return m
}

// TestActionsIfMatch: every operator action takes If-Match; a version the
// message has moved on from is 412 with the current one, and writes
// nothing.
func TestActionsIfMatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	paths := map[string]func(m httpapi.Message) string{
		"redeliver": func(m httpapi.Message) string {
			return "/messages/" + m.ID.String() + "/deliveries/" + m.Deliveries[0].ID.String() + "/redeliver"
		},
		"skip": func(m httpapi.Message) string {
			return "/messages/" + m.ID.String() + "/deliveries/" + m.Deliveries[0].ID.String() + "/skip"
		},
		"redispatch": func(m httpapi.Message) string { return "/messages/" + m.ID.String() + "/redispatch" },
		"resend":     func(m httpapi.Message) string { return "/messages/" + m.ID.String() + "/resend" },
		"replay":     func(m httpapi.Message) string { return "/messages/" + m.ID.String() + "/replay" },
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
			seen := b.message(t, m.ID)
			b.fail(t, m.Deliveries[0].ID)
			now := b.message(t, m.ID)

			before := b.counts(t)
			e := b.act(t, path(seen), strconv.Quote(strconv.Itoa(seen.Version)), nil).
				fails(t, http.StatusPreconditionFailed, httpapi.CodePreconditionFailed)
			if e.Details.Version != now.Version {
				t.Errorf("412 names version %d, the message is at %d", e.Details.Version, now.Version)
			}
			b.act(t, path(seen), "7", nil).invalidField(t, "If-Match")
			b.unchanged(t, before)

			var after httpapi.Message
			r := b.act(t, path(now), strconv.Quote(strconv.Itoa(now.Version)), nil).want(t, http.StatusOK, &after)
			if after.Version <= now.Version || r.header.Get("ETag") != strconv.Quote(strconv.Itoa(after.Version)) {
				t.Errorf("after the action: version %d, ETag %q", after.Version, r.header.Get("ETag"))
			}
		})
	}
	dbtest.Audit(t, b.db)
}

// TestResendAndReplay: generations through the API.
func TestResendAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.target(t, "archive", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	if m.Generation != 1 || m.Version == 0 || m.Deliveries[0].Generation != 1 {
		t.Fatalf("a new message: generation %d version %d", m.Generation, m.Version)
	}
	resend := "/messages/" + m.ID.String() + "/resend"
	before := b.counts(t)
	e := b.act(t, resend, "", nil).fails(t, http.StatusConflict, httpapi.CodeNotResendable)
	if e.Details.State != string(lifecycle.StateQueued) || e.Details.Reason == "" || len(e.Details.Allowed) == 0 {
		t.Errorf("refused resend: %+v", e.Details)
	}
	b.unchanged(t, before)
	for _, d := range m.Deliveries {
		b.fail(t, d.ID)
	}
	before = b.counts(t)
	b.act(t, resend, "", httpapi.ResendRequest{Targets: []string{"ledger"}}).invalidField(t, "targets[0]")
	b.act(t, resend, "", `{"targets": "billing"}`).invalidField(t, "targets")
	b.unchanged(t, before)

	var after httpapi.Message
	b.act(t, resend, "", httpapi.ResendRequest{Targets: []string{"billing"}, Reason: "fixed"}).want(t, http.StatusOK, &after)
	if after.Generation != 2 || after.Status != lifecycle.StatusInProgress || len(after.Deliveries) != 3 {
		t.Fatalf("after resend: %+v", after)
	}
	first := after.Deliveries[0]
	if first.Generation != 2 || first.Target != "billing" || first.State != lifecycle.StateQueued {
		t.Errorf("the newest generation is not listed first: %+v", after.Deliveries)
	}
	for _, d := range after.Deliveries[1:] {
		if d.Generation != 1 || d.State != lifecycle.StateSuperseded {
			t.Errorf("generation 1 after the resend: %+v", d)
		}
	}
	events, err := journal.Stream(b.ctx, b.db, m.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if p, ok := last.Payload.(*journal.MessageResent); !ok || last.Actor != "operator:alice" || p.Reason != "fixed" {
		t.Errorf("journaled %s by %s: %+v", last.Kind(), last.Actor, last.Payload)
	}

	// Replay goes to what the routes match now: archive's route is gone.
	b.fail(t, first.ID)
	var routes struct{ Items []lifecycle.Route }
	b.admin(t, http.MethodGet, "/routes", nil).want(t, http.StatusOK, &routes)
	for _, r := range routes.Items {
		if r.Target == "archive" {
			b.admin(t, http.MethodDelete, "/routes/"+r.ID.String(), nil).want(t, http.StatusNoContent, nil)
		}
	}
	b.act(t, "/messages/"+m.ID.String()+"/replay", "", httpapi.ReplayRequest{Reason: "route changed"}).want(t, http.StatusOK, &after)
	if after.Generation != 3 || after.Deliveries[0].Generation != 3 || after.Deliveries[0].Target != "billing" ||
		after.Deliveries[1].Generation == 3 {
		t.Errorf("after replay: %+v", after)
	}
	b.admin(t, http.MethodPost, "/messages/"+uuid.NewString()+"/replay", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	dbtest.Audit(t, b.db)
}

// TestPossibleDuplicates: a repeated duplicate key is stored, names the
// earlier message and is listed by possible_duplicate=true.
func TestPossibleDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	first := b.ingest(t, ingestToken, httpapi.IngestRequest{DuplicateKey: "ctl-1"})
	second := b.ingest(t, ingestToken, httpapi.IngestRequest{DuplicateKey: "ctl-1"})
	b.ingest(t, ingestToken, httpapi.IngestRequest{DuplicateKey: "ctl-2"})
	if first.PossibleDuplicateOf != nil || first.DuplicateKey == nil || *first.DuplicateKey != "ctl-1" {
		t.Errorf("first: %v %v", first.PossibleDuplicateOf, first.DuplicateKey)
	}
	if second.PossibleDuplicateOf == nil || *second.PossibleDuplicateOf != first.ID || len(second.Deliveries) != 1 {
		t.Errorf("second: %v", second.PossibleDuplicateOf)
	}
	var page httpapi.MessageList
	b.admin(t, http.MethodGet, "/messages?possible_duplicate=true", nil).want(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != second.ID {
		t.Errorf("possible duplicates: %+v", page.Items)
	}
	b.admin(t, http.MethodGet, "/messages?possible_duplicate=false", nil).invalidField(t, "possible_duplicate")
	b.as(t, ingestToken, http.MethodPost, "/messages", httpapi.IngestRequest{Source: "erp", From: "a", To: "b",
		Payload: new("x"), DuplicateKey: string(make([]byte, 256))}).invalidField(t, "duplicate_key")
	dbtest.Audit(t, b.db)
}

// TestMessageType: a type given is kept with the message and shown; one
// outside its alphabet is refused naming the field, and stores nothing.
func TestMessageType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	typed := b.ingest(t, ingestToken, httpapi.IngestRequest{Type: "invoice.created"})
	plain := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	if typed.Type == nil || *typed.Type != "invoice.created" || plain.Type != nil {
		t.Errorf("types %v and %v", typed.Type, plain.Type)
	}
	var read httpapi.Message
	b.admin(t, http.MethodGet, "/messages/"+typed.ID.String(), nil).want(t, http.StatusOK, &read)
	if read.Type == nil || *read.Type != "invoice.created" {
		t.Errorf("read back: %v", read.Type)
	}
	before := b.counts(t)
	for _, bad := range []string{"invoice created", strings.Repeat("t", 256), "naïve"} {
		b.as(t, ingestToken, http.MethodPost, "/messages", httpapi.IngestRequest{Source: "erp", From: "a", To: "b",
			Payload: new("x"), Type: bad}).invalidField(t, "type")
	}
	b.unchanged(t, before)
	dbtest.Audit(t, b.db)
}
