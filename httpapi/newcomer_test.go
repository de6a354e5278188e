package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

// TestNewcomerAnswers holds the answers a newcomer meets in the first hour
// to plain words: a taken name names its field, no answer escapes HTML, an
// action whose body is optional takes none at all, a refused skip says
// plainly why, and the lanes of a target that keeps no order say so.
func TestNewcomerAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "out", nil)

	spec := map[string]any{"name": "out", "kind": "http", "config": map[string]any{"url": "http://127.0.0.1:9/"}}
	if e := b.admin(t, http.MethodPost, "/targets", spec).fails(t, http.StatusConflict, httpapi.CodeAlreadyExists); e.Details.Field != "name" ||
		e.Details.Value != "out" || e.Message != `create target out: a target with name "out" exists already` {
		t.Errorf("ALREADY_EXISTS: %+v", e)
	}

	r := b.send(t, "", http.MethodGet, "/messages", "", nil)
	if !bytes.Contains(r.body, []byte("Bearer <token>")) {
		t.Errorf("401 reads %s, want Bearer <token> as written", r.body)
	}

	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	b.fail(t, m.Deliveries[0].ID)
	path := "/messages/" + m.ID.String() + "/deliveries/" + m.Deliveries[0].ID.String()
	b.send(t, adminToken, http.MethodPost, path+"/skip", "", nil).want(t, http.StatusOK, nil)
	e := b.send(t, adminToken, http.MethodPost, path+"/skip", "", nil).fails(t, http.StatusConflict, httpapi.CodeNotSkippable)
	if !strings.Contains(e.Message, "only a delivery that waits or has failed may be skipped (it is skipped;") {
		t.Errorf("NOT_SKIPPABLE reads %q", e.Message)
	}

	var lanes httpapi.LaneList
	b.admin(t, http.MethodGet, "/targets/out/lanes", nil).want(t, http.StatusOK, &lanes)
	if len(lanes.Items) != 0 || lanes.OrderingMode != lifecycle.OrderingNone {
		t.Errorf("lanes of a target of no order: %+v", lanes)
	}
}
