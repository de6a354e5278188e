package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// TestSkipAndLanes: a fifo target's lanes through the API: the ordering key
// on ingest and on the message, blocked deliveries, the lanes list and its
// pages, skip and its refusals.
func TestSkipAndLanes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "hl7", map[string]any{"ordering": map[string]any{"mode": "fifo"}})
	var target lifecycle.Target
	b.admin(t, http.MethodGet, "/targets/hl7", nil).want(t, http.StatusOK, &target)
	if target.Ordering.Mode != lifecycle.OrderingFIFO || target.Ordering.OnFailure != lifecycle.OnFailureBlock {
		t.Errorf("ordering %+v", target.Ordering)
	}

	// Ingest refuses a key too long, naming the field.
	b.as(t, ingestToken, http.MethodPost, "/messages", httpapi.IngestRequest{Source: "erp", From: "a", To: "b",
		Payload: new("x"), OrderingKey: strings.Repeat("k", 201)}).invalidField(t, "ordering_key")

	var ms []httpapi.Message
	for _, key := range []string{"p-1", "p-1", "p-1", "p-2"} {
		ms = append(ms, b.ingest(t, ingestToken, httpapi.IngestRequest{OrderingKey: key}))
	}
	if k := ms[0].OrderingKey; k == nil || *k != "p-1" {
		t.Errorf("ordering_key %v", k)
	}
	if d := ms[1].Deliveries[0]; d.State != lifecycle.StateBlocked || d.LaneSeq == nil || *d.LaneSeq != 2 || ms[1].Status != lifecycle.StatusBlocked {
		t.Errorf("second of the lane: %s at %v, message %s", d.State, d.LaneSeq, ms[1].Status)
	}

	var lanes httpapi.LaneList
	b.admin(t, http.MethodGet, "/targets/hl7/lanes", nil).want(t, http.StatusOK, &lanes)
	if len(lanes.Items) != 2 || lanes.Items[0].OrderingKey != "p-1" || lanes.Items[0].Waiting != 2 ||
		lanes.Items[0].Head == nil || lanes.Items[0].Head.DeliveryID != ms[0].Deliveries[0].ID || lanes.Items[1].Waiting != 0 {
		t.Fatalf("lanes %+v", lanes)
	}
	b.admin(t, http.MethodGet, "/targets/hl7/lanes?blocked=true", nil).want(t, http.StatusOK, &lanes)
	if len(lanes.Items) != 1 || lanes.Items[0].OrderingKey != "p-1" {
		t.Errorf("blocked lanes %+v", lanes)
	}
	b.admin(t, http.MethodGet, "/targets/hl7/lanes?limit=1", nil).want(t, http.StatusOK, &lanes)
	if len(lanes.Items) != 1 || lanes.NextCursor == nil {
		t.Fatalf("first page %+v", lanes)
	}
	b.admin(t, http.MethodGet, "/targets/hl7/lanes?limit=1&cursor="+*lanes.NextCursor, nil).want(t, http.StatusOK, &lanes)
	if len(lanes.Items) != 1 || lanes.Items[0].OrderingKey != "p-2" || lanes.NextCursor != nil {
		t.Errorf("second page %+v", lanes)
	}
	b.admin(t, http.MethodGet, "/targets/nobody/lanes", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodGet, "/targets/hl7/lanes?blocked=maybe", nil).invalidField(t, "blocked")
	b.admin(t, http.MethodGet, "/targets/hl7/lanes?cursor=!", nil).invalidField(t, "cursor")
	b.admin(t, http.MethodGet, "/targets/HL7%20feed/lanes", nil).invalidField(t, "name")

	// Skipping the head lets the next go; the reason and the operator are
	// journaled.
	head := ms[0]
	path := "/messages/" + head.ID.String() + "/deliveries/" + head.Deliveries[0].ID.String() + "/skip"
	var after httpapi.Message
	b.admin(t, http.MethodPost, path, httpapi.SkipRequest{Reason: "sent by hand"}).want(t, http.StatusOK, &after)
	if after.Status != lifecycle.StatusSkipped || after.Deliveries[0].State != lifecycle.StateSkipped || after.Deliveries[0].FinishedAt == nil {
		t.Errorf("after skip %+v", after)
	}
	var next httpapi.Message
	b.admin(t, http.MethodGet, "/messages/"+ms[1].ID.String(), nil).want(t, http.StatusOK, &next)
	if next.Deliveries[0].State != lifecycle.StateQueued {
		t.Errorf("the next of the lane is %s", next.Deliveries[0].State)
	}
	events, err := journal.Stream(b.ctx, b.db, head.ID.String())
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if p, ok := last.Payload.(*journal.DeliverySkipped); !ok || p.Reason != "sent by hand" || last.Actor != "operator:alice" {
		t.Errorf("journaled %s by %s", last.Kind(), last.Actor)
	}

	// A skipped one again, a delivery of another message, none: refused,
	// nothing written.
	before := b.counts(t)
	e := b.admin(t, http.MethodPost, path, nil).fails(t, http.StatusConflict, httpapi.CodeNotSkippable)
	if e.Details.State != "skipped" || !sameSet(e.Details.Allowed, lifecycle.Strings(lifecycle.SkipRule.States())) {
		t.Errorf("409 details %+v", e.Details)
	}
	b.admin(t, http.MethodPost, "/messages/"+head.ID.String()+"/deliveries/"+ms[1].Deliveries[0].ID.String()+"/skip", nil).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodPost, "/messages/"+head.ID.String()+"/deliveries/"+uuid.NewString()+"/skip", nil).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.admin(t, http.MethodPost, path, `{"why":"x"}`).invalidField(t, "why")
	b.as(t, readerToken, http.MethodPost, path, nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	b.unchanged(t, before)
	dbtest.Audit(t, b.db)
}

func TestListByOrderingKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "hl7", nil)
	a := b.ingest(t, ingestToken, httpapi.IngestRequest{OrderingKey: "p-1"})
	b.ingest(t, ingestToken, httpapi.IngestRequest{OrderingKey: "p-2"})
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
	var page httpapi.MessageList
	b.admin(t, http.MethodGet, "/messages?ordering_key=p-1", nil).want(t, http.StatusOK, &page)
	if len(page.Items) != 1 || page.Items[0].ID != a.ID {
		t.Errorf("by ordering key: %+v", page.Items)
	}
	b.admin(t, http.MethodGet, "/messages?ordering_key="+strings.Repeat("k", 201), nil).invalidField(t, "ordering_key")
}
