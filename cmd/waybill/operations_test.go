package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func init() {
	// The tests' operations move on every answer: no need to wait.
	progressInterval = time.Millisecond
}

const opID = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a99"

// opJSON is an operation resource at a point of its progress.
func opJSON(state string, done, refused int, rate string, eta string) string {
	finished, errText := "null", "null"
	if state != "running" {
		finished = `"2026-12-01T08:00:09Z"`
	}
	if state == "failed" {
		errText = `"the journal refused the batch"`
	}
	return fmt.Sprintf(`{"id":"%s","action":"redeliver","filter":{"status":["error"],"target":"billing"},"reason":"billing is back",
		"state":"%s","matched":4,"done":%d,"refused":%d,"created_by":"alice","started_at":"2026-12-01T08:00:00Z",
		"updated_at":"2026-12-01T08:00:05Z","finished_at":%s,"error":%s,"rate":%s,"eta_seconds":%s}`,
		opID, state, done, refused, finished, errText, rate, eta)
}

// progressAPI answers POST /operations with a running operation and each
// GET of it with the next of steps, the last one for good.
type progressAPI struct {
	*httptest.Server
	mu       sync.Mutex
	steps    []string
	requests []request
}

func newProgressAPI(t *testing.T, steps ...string) *progressAPI {
	p := &progressAPI{steps: steps}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.requests = append(p.requests, request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: string(body)})
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/operations":
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, opJSON("running", 0, 0, "null", "null"))
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/operations/"+opID:
			io.WriteString(w, p.steps[0])
			if len(p.steps) > 1 {
				p.steps = p.steps[1:]
			}
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"NOT_FOUND","message":"no such resource","details":{}}}`)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

// TestOperationsCreateShowsProgress: create sends the filter, then prints
// a line each time the operation moves until it ends; done exits 0.
func TestOperationsCreateShowsProgress(t *testing.T) {
	t.Parallel()
	api := newProgressAPI(t,
		opJSON("running", 0, 0, "null", "null"),
		opJSON("running", 2, 0, "1", "2"),
		opJSON("running", 2, 0, "1", "2"),
		opJSON("done", 3, 1, "null", "null"))
	code, out, errOut := waybillCLI(t, "operations", "create", "--action", "redeliver", "--status", "error",
		"--target", "billing", "--reason", "billing is back", "--server", api.URL, "--token", "wb_x")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	want := `operation ` + opID + ` started: redeliver of 4 messages
0/4 (0%) running: 0 done, 0 refused, - messages/s, ETA -
2/4 (50%) running: 2 done, 0 refused, 1.0 messages/s, ETA 2s
4/4 (100%) done: 3 done, 1 refused, - messages/s, ETA -
operation ` + opID + ` done: 3 done, 1 refused, of 4
the refusals and why: waybill operations show ` + opID + `
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	api.mu.Lock()
	first := api.requests[0]
	api.mu.Unlock()
	if first.Method != http.MethodPost || !strings.Contains(first.Body, `"filter":{"status":["error"],"target":"billing"}`) ||
		!strings.Contains(first.Body, `"action":"redeliver"`) || !strings.Contains(first.Body, `"dry_run":false`) {
		t.Errorf("request %+v", first)
	}
}

// TestOperationsCreateEndsFailed: an operation that fails exits 1 and
// prints why.
func TestOperationsCreateEndsFailed(t *testing.T) {
	t.Parallel()
	api := newProgressAPI(t, opJSON("failed", 1, 0, "null", "null"))
	code, out, _ := waybillCLI(t, "operations", "create", "--action", "redeliver", "--status", "error", "--server", api.URL, "--token", "wb_x")
	if code != 1 || !strings.Contains(out, "operation "+opID+" failed: 1 done, 0 refused, of 4\nerror: the journal refused the batch\n") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestOperationsDryRunListShowCancel(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"POST /api/v1/operations": {200, `{"matched":2,"sample":["` + msgID + `","` + msgID2 + `"],"decided":2,"done":1,"refused":1,
			"refusals":[{"code":"NOT_SKIPPABLE","count":1,"example":"delivery not skippable: no delivery of generation 1 is waiting or failed (its deliveries: billing delivered)"}]}`},
		"GET /api/v1/operations":         {200, `{"items":[` + opJSON("running", 2, 0, "1.5", "2") + `],"next_cursor":"abc"}`},
		"GET /api/v1/operations/" + opID: {200, opJSON("done", 3, 1, "null", "null")},
		"GET /api/v1/operations/" + opID + "/refusals": {200, `{"items":[{"message_id":"` + msgID + `",
			"reason":"delivery not redeliverable: no delivery of generation 1 to billing is failed or stalled"}],"next_cursor":null}`},
		"POST /api/v1/operations/" + opID + "/cancel": {409, `{"error":{"code":"NOT_CANCELLABLE","message":"operation not cancellable: the operation has ended","details":{"state":"done","allowed":["running"]}}}`},
	})
	srv := []string{"--server", api.URL, "--token", "wb_x"}

	code, out, errOut := waybillCLI(t, append([]string{"operations", "create", "--action", "skip", "--source", "erp",
		"--created-before", "2026-12-01T00:00:00Z", "--dry-run"}, srv...)...)
	if code != 0 || out != "dry run: skip matches 2 messages: it would act on 1 message and refuse 1; nothing was changed\n"+
		"refused, by reason:\n"+
		"  1  NOT_SKIPPABLE  e.g. delivery not skippable: no delivery of generation 1 is waiting or failed (its deliveries: billing delivered)\n"+
		"the first 2, in the order it would take them:\n  "+msgID+"\n  "+msgID2+"\n" {
		t.Errorf("dry run: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = waybillCLI(t, append([]string{"operations", "list", "--limit", "1"}, srv...)...)
	wantList := `ID                                    STARTED               ACTION     STATE    TAKEN  DONE  REFUSED  BY
` + opID + `  2026-12-01T08:00:00Z  redeliver  running  2/4    2     0        alice

next page: waybill operations list --limit 1 --cursor abc
`
	if code != 0 || out != wantList {
		t.Errorf("list: exit %d\n%s%s\nwant:\n%s", code, out, errOut, wantList)
	}

	code, out, errOut = waybillCLI(t, append([]string{"operations", "show", opID}, srv...)...)
	for _, want := range []string{"filter     status error; target billing", "reason     billing is back",
		"progress   4/4 (100%) done: 3 done, 1 refused", "refusals\nMESSAGE", msgID + "  delivery not redeliverable: no delivery"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show: exit %d, no %q in\n%s%s", code, want, out, errOut)
		}
	}

	code, _, errOut = waybillCLI(t, append([]string{"operations", "cancel", opID}, srv...)...)
	if code != 1 || !strings.Contains(errOut, "NOT_CANCELLABLE") || !strings.Contains(errOut, "state: done") {
		t.Errorf("cancel: exit %d\n%s", code, errOut)
	}

	// Misuse: nothing is sent.
	before := len(api.seen())
	for _, args := range [][]string{
		{"operations", "create", "--status", "error"},
		{"operations", "show", "not-an-id"},
		{"operations", "cancel"},
		{"operations", "list", "extra"},
		{"operations", "purge"},
	} {
		if code, _, _ := waybillCLI(t, append(args, srv...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if n := len(api.seen()); n != before {
		t.Errorf("misuse sent %d requests", n-before)
	}
	// Asked for help, or given no subcommand, it says how it is used.
	for args, want := range map[string]int{"operations --help": 0, "operations help": 0, "operations": 2} {
		code, _, errOut := waybillCLI(t, strings.Fields(args)...)
		if code != want || !strings.Contains(errOut, "usage: waybill operations create --action A") || !strings.Contains(errOut, "waybill operations cancel ID") {
			t.Errorf("%s: exit %d, stderr %q", args, code, errOut)
		}
	}
}
