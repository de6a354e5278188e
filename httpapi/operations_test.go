package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/bulk"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// opBody is a POST /operations body.
func opBody(action string, filter map[string]any, more map[string]any) map[string]any {
	body := map[string]any{"action": action, "filter": filter}
	for k, v := range more {
		body[k] = v
	}
	return body
}

// TestOperationValidation: every field of POST /operations is checked
// before anything is read or written, and each problem names its field.
func TestOperationValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
	before := b.counts(t)
	for _, tt := range []struct {
		name  string
		body  any
		field string
	}{
		{"no action", map[string]any{"filter": map[string]any{"source": "erp"}}, "action"},
		{"unknown action", opBody("delete", map[string]any{"source": "erp"}, nil), "action"},
		{"no filter", map[string]any{"action": "resend"}, "filter"},
		{"empty filter", opBody("resend", map[string]any{}, nil), "filter"},
		{"unknown status", opBody("resend", map[string]any{"status": []string{"error", "broken"}}, nil), "filter.status[1]"},
		{"status twice", opBody("resend", map[string]any{"status": []string{"error", "error"}}, nil), "filter.status[1]"},
		{"status not a list", opBody("resend", map[string]any{"status": "error"}, nil), "filter.status"},
		{"bad target", opBody("resend", map[string]any{"target": "Billing!"}, nil), "filter.target"},
		{"bad source", opBody("resend", map[string]any{"source": ""}, map[string]any{}), "filter"},
		{"bad source name", opBody("resend", map[string]any{"source": "ERP"}, nil), "filter.source"},
		{"bad time", opBody("resend", map[string]any{"created_after": "yesterday"}, nil), "filter.created_after"},
		{"past the year 9999 in UTC", opBody("resend", map[string]any{"created_before": "9999-12-31T23:00:00-05:00"}, nil), "filter.created_before"},
		{"before the year 0 in UTC", opBody("resend", map[string]any{"created_after": "0000-01-01T00:00:00+01:00"}, nil), "filter.created_after"},
		{"a dry run past the year 9999", opBody("resend", map[string]any{"created_before": "9999-12-31T23:00:00-05:00"},
			map[string]any{"dry_run": true}), "filter.created_before"},
		{"times the wrong way", opBody("resend", map[string]any{"created_after": "2026-12-02T00:00:00Z",
			"created_before": "2026-12-01T00:00:00Z"}, nil), "filter.created_before"},
		{"unknown filter field", opBody("resend", map[string]any{"source": "erp", "ordering_key": "k"}, nil), "filter.ordering_key"},
		{"unknown field", opBody("resend", map[string]any{"source": "erp"}, map[string]any{"rate": 5}), "rate"},
		{"reason too long", opBody("resend", map[string]any{"source": "erp"}, map[string]any{"reason": strings.Repeat("x", 1001)}), "reason"},
		{"reason too long as stored", opBody("resend", map[string]any{"source": "erp"}, map[string]any{"reason": strings.Repeat("\x00", 400)}), "reason"},
		{"dry_run not a bool", opBody("resend", map[string]any{"source": "erp"}, map[string]any{"dry_run": "yes"}), "dry_run"},
		{"not an object", "[1]", "body"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b.admin(t, http.MethodPost, "/operations", tt.body).invalidField(t, tt.field)
		})
	}
	b.as(t, readerToken, http.MethodPost, "/operations", opBody("resend", map[string]any{"source": "erp"}, nil)).
		fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	b.send(t, adminToken, http.MethodPost, "/operations", "text/plain", []byte(`{}`)).
		fails(t, http.StatusUnsupportedMediaType, httpapi.CodeUnsupportedMediaType)
	for _, path := range []string{"/operations?limit=0", "/operations?cursor=nope", "/operations?page=2",
		"/operations/" + uuid.NewString() + "/refusals?cursor=1", "/operations/abc"} {
		b.admin(t, http.MethodGet, path, nil).fails(t, http.StatusBadRequest, httpapi.CodeInvalidField)
	}
	b.unchanged(t, before)
	var list httpapi.OperationList
	b.admin(t, http.MethodGet, "/operations", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 0 || list.NextCursor != nil {
		t.Errorf("operations after refusals only: %+v", list)
	}
}

// TestDryRunAppliesTheRunsRules: a dry run of redeliver on delivered
// messages says it would act on none and refuse each, with the code the
// run refuses them with; an answer read as before (matched, sample) still
// reads.
func TestDryRunAppliesTheRunsRules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	c, err := b.w.Claim(b.ctx, m.Deliveries[0].ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.w.Complete(b.ctx, m.Deliveries[0].ID, c.Token, lifecycle.Delivered("200 OK")); err != nil {
		t.Fatal(err)
	}
	before := b.counts(t)
	var dry struct {
		Matched  int         `json:"matched"`
		Sample   []uuid.UUID `json:"sample"`
		Done     int         `json:"done"`
		Refused  int         `json:"refused"`
		Refusals []struct {
			Code    string `json:"code"`
			Count   int    `json:"count"`
			Example string `json:"example"`
		} `json:"refusals"`
	}
	b.admin(t, http.MethodPost, "/operations", opBody("redeliver", map[string]any{"status": []string{"delivered"}},
		map[string]any{"dry_run": true})).want(t, http.StatusOK, &dry)
	if dry.Matched != 1 || len(dry.Sample) != 1 || dry.Sample[0] != m.ID || dry.Done != 0 || dry.Refused != 1 ||
		len(dry.Refusals) != 1 || dry.Refusals[0].Code != "NOT_REDELIVERABLE" || dry.Refusals[0].Count != 1 ||
		!strings.Contains(dry.Refusals[0].Example, "no delivery of generation 1 is failed or stalled") {
		t.Fatalf("dry run %+v", dry)
	}
	b.unchanged(t, before)
}

// TestOperationLifecycle creates, dry-runs, lists, shows and cancels
// operations over the API, and runs one to its end with the runner.
func TestOperationLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	var failed []httpapi.Message
	for range 3 {
		m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
		b.fail(t, m.Deliveries[0].ID)
		failed = append(failed, m)
		b.clock.Advance(time.Millisecond)
	}
	inFlight := b.ingest(t, ingestToken, httpapi.IngestRequest{})

	// A dry run counts and writes nothing; its sample is in the order the
	// operation would take the messages, oldest first.
	before := b.counts(t)
	var dry httpapi.DryRun
	b.admin(t, http.MethodPost, "/operations", opBody("resend", map[string]any{"status": []string{"error", "in_progress"}},
		map[string]any{"dry_run": true})).want(t, http.StatusOK, &dry)
	if dry.Matched != 4 || len(dry.Sample) != 4 || dry.Sample[0] != failed[0].ID || dry.Sample[3] != inFlight.ID ||
		dry.Done != 3 || dry.Refused != 1 || len(dry.Refusals) != 1 || dry.Refusals[0].Code != httpapi.CodeNotResendable ||
		dry.Refusals[0].Count != 1 || !strings.Contains(dry.Refusals[0].Example, "in hand") {
		t.Fatalf("dry run %+v", dry)
	}
	b.unchanged(t, before)

	var op httpapi.Operation
	r := b.admin(t, http.MethodPost, "/operations", opBody("resend", map[string]any{"status": []string{"error", "in_progress"}},
		map[string]any{"reason": "partner fixed it"})).want(t, http.StatusAccepted, &op)
	if loc := r.header.Get("Location"); loc != httpapi.Prefix+"/operations/"+op.ID.String() {
		t.Errorf("Location %q", loc)
	}
	if op.State != lifecycle.OperationRunning || op.Matched != 4 || op.Done != 0 || op.CreatedBy != "alice" ||
		op.Reason == nil || *op.Reason != "partner fixed it" || op.FinishedAt != nil || op.Rate != nil || op.EtaSeconds != nil {
		t.Fatalf("created %+v", op)
	}

	// The runner takes it in batches of one at rate 4.
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 5},
		"operations": map[string]any{"rate": 4}}).want(t, http.StatusOK, nil)
	runner, err := bulk.New(bulk.Config{Base: service.Base{Now: b.clock.Now, Logger: quiet}, Writer: b.w, DB: b.db})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		b.clock.Advance(time.Second)
		if res, err := runner.Step(b.ctx); err != nil || res.Taken != 1 {
			t.Fatalf("step %+v %v", res, err)
		}
	}
	var shown httpapi.Operation
	b.as(t, readerToken, http.MethodGet, "/operations/"+op.ID.String(), nil).want(t, http.StatusOK, &shown)
	if shown.Done != 2 || shown.State != lifecycle.OperationRunning || shown.Rate == nil || *shown.Rate != 1 ||
		shown.EtaSeconds == nil || *shown.EtaSeconds != 2 {
		t.Fatalf("shown %+v", shown)
	}

	// A second operation, cancelled before it runs; cancelling again is 409.
	var second httpapi.Operation
	b.admin(t, http.MethodPost, "/operations", opBody("skip", map[string]any{"target": "billing"}, nil)).
		want(t, http.StatusAccepted, &second)
	// A reason is bounded as the journal keeps it: a NUL takes three bytes.
	b.admin(t, http.MethodPost, "/operations/"+second.ID.String()+"/cancel", map[string]any{"reason": strings.Repeat("\x00", 400)}).
		invalidField(t, "reason")
	var cancelled httpapi.Operation
	b.admin(t, http.MethodPost, "/operations/"+second.ID.String()+"/cancel", map[string]any{"reason": "wrong filter"}).
		want(t, http.StatusOK, &cancelled)
	if cancelled.State != lifecycle.OperationCancelled || cancelled.FinishedAt == nil {
		t.Fatalf("cancelled %+v", cancelled)
	}
	e := b.admin(t, http.MethodPost, "/operations/"+second.ID.String()+"/cancel", nil).
		fails(t, http.StatusConflict, httpapi.CodeNotCancellable)
	if e.Details.State != "cancelled" || len(e.Details.Allowed) != 1 || e.Details.Allowed[0] != "running" {
		t.Errorf("details %+v", e.Details)
	}
	b.admin(t, http.MethodPost, "/operations/"+uuid.NewString()+"/cancel", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodGet, "/operations/"+uuid.NewString(), nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodGet, "/operations/"+uuid.NewString()+"/refusals", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)

	// The first runs to its end: the message in flight is refused.
	for range 10 {
		b.clock.Advance(time.Second)
		if _, err := runner.Step(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	b.admin(t, http.MethodGet, "/operations/"+op.ID.String(), nil).want(t, http.StatusOK, &shown)
	if shown.State != lifecycle.OperationDone || shown.Done != 3 || shown.Refused != 1 || shown.FinishedAt == nil ||
		shown.Rate != nil || shown.EtaSeconds != nil {
		t.Fatalf("ended %+v", shown)
	}
	var refusals httpapi.RefusalList
	b.admin(t, http.MethodGet, "/operations/"+op.ID.String()+"/refusals", nil).want(t, http.StatusOK, &refusals)
	if len(refusals.Items) != 1 || refusals.Items[0].MessageID != inFlight.ID || refusals.NextCursor != nil ||
		!strings.Contains(refusals.Items[0].Reason, "its delivery to billing is queued") {
		t.Fatalf("refusals %+v", refusals)
	}

	// The list, newest first, a page at a time.
	var page httpapi.OperationList
	b.admin(t, http.MethodGet, "/operations?limit=1", nil).want(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != second.ID || page.NextCursor == nil {
		t.Fatalf("first page %+v", page)
	}
	b.admin(t, http.MethodGet, "/operations?limit=1&cursor="+*page.NextCursor, nil).want(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != op.ID || page.NextCursor != nil {
		t.Fatalf("second page %+v", page)
	}
	var m httpapi.Message
	b.admin(t, http.MethodGet, "/messages/"+failed[0].ID.String(), nil).want(t, http.StatusOK, &m)
	if m.Generation != 2 {
		t.Errorf("resent message at generation %d", m.Generation)
	}
	dbtest.Audit(t, b.db)
}
