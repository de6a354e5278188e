package httpapi_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/projection"
)

// TestRebuildThroughTheAPI starts an online rebuild with POST /rebuilds
// and follows it with GET /rebuilds/{id} and /rebuilds/latest to its end:
// done, the switch's lock measured, no violation. Starting one takes an
// admin token; an unknown id is a 404.
func TestRebuildThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
	b.as(t, readerToken, http.MethodPost, "/rebuilds", nil).fails(t, http.StatusForbidden, httpapi.CodeForbidden)
	b.admin(t, http.MethodGet, "/rebuilds/latest", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	var started httpapi.Rebuild
	b.admin(t, http.MethodPost, "/rebuilds", nil).want(t, http.StatusAccepted, &started)
	if started.Phase != projection.PhaseFold || started.StartedBy == "" || started.FinishedAt != nil {
		t.Fatalf("started: %+v", started)
	}
	var run httpapi.Rebuild
	testpoll.Until(t, "the rebuild to end", func() bool {
		b.as(t, readerToken, http.MethodGet, "/rebuilds/"+started.ID.String(), nil).want(t, http.StatusOK, &run)
		return run.FinishedAt != nil
	})
	if run.Phase != projection.PhaseDone || run.Error != nil || run.Violations == nil || *run.Violations != 0 ||
		run.LockHeldMs == nil || run.Events == 0 {
		t.Fatalf("ended: %+v", run)
	}
	var latest httpapi.Rebuild
	b.admin(t, http.MethodGet, "/rebuilds/latest", nil).want(t, http.StatusOK, &latest)
	if latest.ID != started.ID {
		t.Fatalf("latest is %s, want %s", latest.ID, started.ID)
	}
	b.admin(t, http.MethodGet, "/rebuilds/not-an-id", nil).invalidField(t, "id")
}

// TestRebuildPanicFailsItAlone: a panic in an online rebuild ends it as
// failed, saying so, as a returned error does; the server serves on, and
// the next rebuild is done.
func TestRebuildPanicFailsItAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
	var armed atomic.Bool
	armed.Store(true)
	b.api.PauseRebuilds(func(p projection.OnlinePhase) {
		if p == projection.PhaseSwitch && armed.CompareAndSwap(true, false) {
			panic("boom in the switch")
		}
	})
	ended := func() httpapi.Rebuild {
		t.Helper()
		var started, run httpapi.Rebuild
		b.admin(t, http.MethodPost, "/rebuilds", nil).want(t, http.StatusAccepted, &started)
		testpoll.Until(t, "the rebuild to end", func() bool {
			b.admin(t, http.MethodGet, "/rebuilds/"+started.ID.String(), nil).want(t, http.StatusOK, &run)
			return run.FinishedAt != nil
		})
		return run
	}
	if run := ended(); run.Phase != projection.PhaseFailed || run.Error == nil || !strings.Contains(*run.Error, "panicked: boom in the switch") {
		t.Fatalf("ended: %+v", run)
	}
	if run := ended(); run.Phase != projection.PhaseDone || run.Error != nil {
		t.Fatalf("the next ended: %+v", run)
	}
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
}
