package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The client commands against canned answers in the API's contract: these
// tests check the requests the commands send and what they print, not the
// server.

const (
	msgID  = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01"
	msgID2 = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a02"
	dlvID  = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4ad1"
	dlvID2 = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4ad2"
)

const messageJSON = `{"id":"` + msgID + `","version":7,"generation":2,"source":"erp","from":"acme","to":"globex","stage":"dispatched",
	"status":"retrying","error":"","duplicate_key":"ctl-9","possible_duplicate_of":"` + msgID2 + `","type":"invoice.created","deliver_at":"2025-03-04T10:11:00Z","created_at":"2025-03-04T10:11:12.345678Z","updated_at":"2025-03-04T10:12:00Z",
	"payload_size":1234,"payload_sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
	"deliveries":[
	 {"id":"` + dlvID + `","generation":2,"target":"billing","state":"retrying","attempts":3,"next_attempt_at":"2025-03-04T10:13:00+01:00",
	  "last_error":"POST http://billing/in: 503 Service Unavailable\n\tupstream down","created_at":"2025-03-04T10:11:12Z",
	  "updated_at":"2025-03-04T10:12:00Z","finished_at":null},
	 {"id":"` + dlvID2 + `","generation":1,"target":"archive","state":"delivered","attempts":1,"next_attempt_at":null,
	  "last_error":"","created_at":"2025-03-04T10:11:12Z","updated_at":"2025-03-04T10:11:13Z","finished_at":"2025-03-04T10:11:13Z"}]}`

const historyJSON = `{"items":[
	{"position":17,"at":"2025-03-04T10:11:12Z","kind":"message.accepted","actor":"ingest:erp-feed","delivery_id":null,"target":null,"old_state":null,"new_state":null,"text":""},
	{"position":18,"at":"2025-03-04T10:11:12Z","kind":"message.dispatched","actor":"system","delivery_id":null,"target":null,"old_state":null,"new_state":null,"text":"2 targets"},
	{"position":21,"at":"2025-03-04T10:11:13Z","kind":"delivery.claimed","actor":"worker","delivery_id":"` + dlvID + `","target":"billing","old_state":"queued","new_state":"delivering","text":""},
	{"position":22,"at":"2025-03-04T10:11:14Z","kind":"delivery.attempted","actor":"worker","delivery_id":"` + dlvID + `","target":"billing","old_state":"delivering","new_state":"retrying","text":"503 Service Unavailable"}]}`

// request is what the fake server saw.
type request struct {
	Method, Path, Query, Authorization, ContentType, Accept, IfMatch, Body string
}

type answer struct {
	status int
	body   string
}

// fakeAPI serves canned answers by "METHOD /path" and records the requests.
type fakeAPI struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
}

func newFakeAPI(t *testing.T, answers map[string]answer) *fakeAPI {
	f := &fakeAPI{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, request{r.Method, r.URL.Path, r.URL.RawQuery,
			r.Header.Get("Authorization"), r.Header.Get("Content-Type"), r.Header.Get("Accept"), r.Header.Get("If-Match"), string(body)})
		f.mu.Unlock()
		a, ok := answers[r.Method+" "+r.URL.Path]
		if !ok {
			a = answer{404, `{"error":{"code":"NOT_FOUND","message":"no such resource","details":{}}}`}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) seen() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

func checkRequests(t *testing.T, got []request, want ...request) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("requests:\n%+v\nwant:\n%+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestMessagesList(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"GET /api/v1/messages": {200, `{"items":[` + messageJSON + `,
			{"id":"` + msgID2 + `","source":"erp","from":"acme","to":"initech","stage":"refused","status":"refused",
			 "error":"no route matched\tand the payload was refused by a rule that is explained in a rather long text here",
			 "created_at":"2025-03-04T10:00:00Z","updated_at":"2025-03-04T10:00:00Z","payload_size":0,"payload_sha256":"","deliveries":[]}],
			"next_cursor":"eyJ0IjoiMjAyNSJ9 =="}`},
	})
	// Flags before and after the command's own.
	code, out, errOut := waybillCLI(t, "messages", "--server", api.URL+"/", "--status", "retrying", "--type", "invoice.created",
		"--from", "acme", "--limit", "2", "--token", "wb_secret")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The filters of the API a newcomer reaches for first.
	if code, _, errOut := waybillCLI(t, "messages", "--server", api.URL, "--source", "erp", "--target", "billing",
		"--ordering-key", "patient-42", "--token", "wb_secret"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkRequests(t, api.seen(), request{Method: "GET", Path: "/api/v1/messages", Query: "from=acme&limit=2&status=retrying&type=invoice.created",
		Authorization: "Bearer wb_secret", Accept: "application/json"},
		request{Method: "GET", Path: "/api/v1/messages", Query: "ordering_key=patient-42&source=erp&target=billing",
			Authorization: "Bearer wb_secret", Accept: "application/json"})
	want := `ID                                    CREATED               STATUS    STAGE       SOURCE  FROM  TO       ERROR
0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01  2025-03-04T10:11:12Z  retrying  dispatched  erp     acme  globex   -
0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a02  2025-03-04T10:00:00Z  refused   refused     erp     acme  initech  no route matched and the payload was refused by a rule that…

next page: waybill messages --status retrying --type invoice.created --from acme --limit 2 --cursor 'eyJ0IjoiMjAyNSJ9 =='
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestMessagesListEmpty(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{"GET /api/v1/messages": {200, `{"items":[],"next_cursor":null}`}})
	code, out, errOut := waybillCLI(t, "messages", "--server", api.URL, "--token", "t")
	if code != 0 || out != "no messages\n" {
		t.Fatalf("exit %d, output %q, %s", code, out, errOut)
	}
	checkRequests(t, api.seen(), request{Method: "GET", Path: "/api/v1/messages", Authorization: "Bearer t", Accept: "application/json"})
}

func TestMessagesShow(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"GET /api/v1/messages/" + msgID:              {200, messageJSON},
		"GET /api/v1/messages/" + msgID + "/history": {200, historyJSON},
	})
	code, out, errOut := waybillCLI(t, "messages", "show", msgID, "--server", api.URL, "--token", "t")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	get := request{Method: "GET", Authorization: "Bearer t", Accept: "application/json"}
	m, h := get, get
	m.Path = "/api/v1/messages/" + msgID
	h.Path = "/api/v1/messages/" + msgID + "/history"
	checkRequests(t, api.seen(), m, h)
	want := `message                0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01
version                7
status                 retrying
stage                  dispatched
generation             2
source                 erp
from                   acme
to                     globex
type                   invoice.created
payload                1234 bytes, sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
duplicate key          ctl-9
possible duplicate of  0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a02
deliver at             2025-03-04T10:11:00Z
created                2025-03-04T10:11:12Z
updated                2025-03-04T10:12:00Z

deliveries
ID                                    GEN  TARGET   STATE      ATTEMPTS  NEXT ATTEMPT          FINISHED              LANE  LAST ERROR
0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4ad1  2    billing  retrying   3         2025-03-04T09:13:00Z  -                     -     POST http://billing/in: 503 Service Unavailable upstream down
0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4ad2  1    archive  delivered  1         -                     2025-03-04T10:11:13Z  -     -

history
POSITION  AT                    KIND                ACTOR            TARGET   STATE                   TEXT
17        2025-03-04T10:11:12Z  message.accepted    ingest:erp-feed  -        -                       -
18        2025-03-04T10:11:12Z  message.dispatched  system           -        -                       2 targets
21        2025-03-04T10:11:13Z  delivery.claimed    worker           billing  queued -> delivering    -
22        2025-03-04T10:11:14Z  delivery.attempted  worker           billing  delivering -> retrying  503 Service Unavailable
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestRedeliverAndRedispatch(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"POST /api/v1/messages/" + msgID + "/deliveries/" + dlvID + "/redeliver": {200, messageJSON},
		"POST /api/v1/messages/" + msgID + "/redispatch":                         {200, messageJSON},
		"POST /api/v1/messages/" + msgID + "/deliver-now":                        {200, messageJSON},
	})
	post := request{Method: "POST", Authorization: "Bearer t", ContentType: "application/json", Accept: "application/json"}

	code, out, errOut := waybillCLI(t, "redeliver", "--server", api.URL, "--token", "t", msgID, dlvID)
	if code != 0 || !strings.HasPrefix(out, "delivery "+dlvID+" redelivered\n\nmessage                "+msgID+"\nversion                7\n") ||
		!strings.Contains(out, "\ndeliveries\n") || strings.Contains(out, "history") {
		t.Fatalf("redeliver: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = waybillCLI(t, "redispatch", msgID, "--server", api.URL, "--token", "t")
	if code != 0 || !strings.HasPrefix(out, "message "+msgID+" redispatched\n\nmessage                "+msgID+"\n") {
		t.Fatalf("redispatch: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = waybillCLI(t, "deliver-now", msgID, "--server", api.URL, "--token", "t")
	if code != 0 || !strings.HasPrefix(out, "message "+msgID+" delivered now\n\n") {
		t.Fatalf("deliver-now: exit %d\n%s%s", code, out, errOut)
	}
	r1, r2, r3 := post, post, post
	r1.Path = "/api/v1/messages/" + msgID + "/deliveries/" + dlvID + "/redeliver"
	r2.Path = "/api/v1/messages/" + msgID + "/redispatch"
	r3.Path = "/api/v1/messages/" + msgID + "/deliver-now"
	checkRequests(t, api.seen(), r1, r2, r3)
}

func TestResendReplayIfVersion(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"POST /api/v1/messages/" + msgID + "/resend": {200, messageJSON},
		"POST /api/v1/messages/" + msgID + "/replay": {412, `{"error":{"code":"PRECONDITION_FAILED",
			"message":"message changed: the message is at version 9, not 7","details":{"version":9}}}`},
	})
	code, out, errOut := waybillCLI(t, "resend", msgID, "--target", "billing", "--target", "archive", "--reason", "fixed",
		"--if-version", "7", "--server", api.URL, "--token", "t")
	if code != 0 || !strings.HasPrefix(out, "message "+msgID+" resent\n\n") || !strings.Contains(out, "generation             2\n") {
		t.Fatalf("resend: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = waybillCLI(t, "replay", msgID, "--if-version", "7", "--server", api.URL, "--token", "t")
	wantErr := tokenWarning + `waybill replay: PRECONDITION_FAILED: message changed: the message is at version 9, not 7 (HTTP 412)
  version: 9
the message changed since that version: look at it again (waybill messages show ` + msgID + `) before acting
`
	if code != 1 || out != "" || errOut != wantErr {
		t.Fatalf("replay: exit %d\n%s%s\nwant\n%s", code, out, errOut, wantErr)
	}
	post := request{Method: "POST", Authorization: "Bearer t", ContentType: "application/json", Accept: "application/json", IfMatch: `"7"`}
	resend, replay := post, post
	resend.Path, resend.Body = "/api/v1/messages/"+msgID+"/resend", `{"reason":"fixed","targets":["billing","archive"]}`
	replay.Path, replay.Body = "/api/v1/messages/"+msgID+"/replay", `{"reason":""}`
	checkRequests(t, api.seen(), resend, replay)
}

func TestSkipAndLanes(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"POST /api/v1/messages/" + msgID + "/deliveries/" + dlvID + "/skip": {200, messageJSON},
		"GET /api/v1/targets/billing/lanes": {200, `{"items":[{"ordering_key":"patient-42","head":{"message_id":"` + msgID +
			`","delivery_id":"` + dlvID + `","state":"failed","since":"2025-03-04T10:11:12Z"},"waiting":3,` +
			`"waiting_since":"2025-03-04T10:11:13Z"},{"ordering_key":"patient-7","head":null,"waiting":0,"waiting_since":null}],` +
			`"next_cursor":"cGF0aWVudC03"}`},
	})
	code, out, errOut := waybillCLI(t, "skip", "--server", api.URL, "--token", "t", "--reason", "sent by hand", msgID, dlvID)
	if code != 0 || !strings.HasPrefix(out, "delivery "+dlvID+" skipped\n\nmessage                "+msgID+"\n") {
		t.Fatalf("skip: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = waybillCLI(t, "lanes", "billing", "--blocked", "--server", api.URL, "--token", "t")
	want := `ORDERING KEY  HEAD MESSAGE                          HEAD DELIVERY                         STATE   HEAD SINCE            WAITING  WAITING SINCE
patient-42    ` + msgID + `  ` + dlvID + `  failed  2025-03-04T10:11:12Z  3        2025-03-04T10:11:13Z
patient-7     -                                     -                                     -       -                     0        -

next page: waybill lanes billing --blocked --cursor cGF0aWVudC03
`
	if code != 0 || out != want {
		t.Fatalf("lanes: exit %d\n%s\nwant\n%s%s", code, out, want, errOut)
	}
	skip := request{Method: "POST", Authorization: "Bearer t", ContentType: "application/json", Accept: "application/json",
		Path: "/api/v1/messages/" + msgID + "/deliveries/" + dlvID + "/skip", Body: `{"reason":"sent by hand"}`}
	lanes := request{Method: "GET", Authorization: "Bearer t", Accept: "application/json",
		Path: "/api/v1/targets/billing/lanes", Query: "blocked=true"}
	checkRequests(t, api.seen(), skip, lanes)
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{
		"POST /api/v1/messages/" + msgID + "/redispatch": {409, `{"error":{"code":"NOT_REDISPATCHABLE",
			"message":"the message was refused: only a dispatched message can be redispatched",
			"details":{"stage":"refused","allowed":["dispatched"]}}}`},
		"GET /api/v1/messages": {400, `{"error":{"code":"INVALID_STATUS","message":"\"done\" is not a status",
			"details":{"field":"status","allowed":["received","in_progress","delivered"]}}}`},
		"GET /api/v1/messages/" + msgID: {502, "<html>Bad Gateway</html>"},
		"POST /api/v1/messages/" + msgID + "/deliveries/" + dlvID + "/redeliver": {401,
			`{"error":{"code":"UNAUTHORIZED","message":"a valid bearer token is required"}}`},
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"redispatch", msgID}, `waybill redispatch: NOT_REDISPATCHABLE: the message was refused: only a dispatched message can be redispatched (HTTP 409)
  allowed: ["dispatched"]
  stage: refused
`},
		{[]string{"messages", "--status", "done"}, `waybill messages: INVALID_STATUS: "done" is not a status (HTTP 400)
  allowed: ["received","in_progress","delivered"]
  field: status
`},
		{[]string{"messages", "show", msgID}, "waybill messages: HTTP 502 Bad Gateway: <html>Bad Gateway</html>\n"},
		{[]string{"redeliver", msgID, dlvID}, `waybill redeliver: UNAUTHORIZED: a valid bearer token is required (HTTP 401)
the server refused the token from --token or WAYBILL_TOKEN
`},
	} {
		code, out, errOut := waybillCLI(t, append(c.args, "--server", api.URL, "--token", "t")...)
		// The warning that --token shows in ps comes first.
		if code != 1 || out != "" || errOut != tokenWarning+c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant:\n%s", c.args, code, out, errOut, c.want)
		}
	}
}

func TestClientMisuse(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"messages", "show"}, "missing MESSAGE_ID: show takes one message id"},
		{[]string{"messages", "show", "42"}, `"42" is not a message id`},
		{[]string{"messages", "show", msgID, msgID2}, "waybill messages: unexpected arguments [\"" + msgID2 + "\"]: show takes one message id\nusage: waybill messages"},
		{[]string{"messages", "list"}, "unexpected arguments"},
		{[]string{"messages", "--limit", "-1"}, "--limit: must be positive"},
		{[]string{"redeliver", msgID}, "waybill redeliver: missing DELIVERY_ID\nusage: waybill redeliver MESSAGE_ID DELIVERY_ID"},
		{[]string{"skip"}, "waybill skip: missing MESSAGE_ID DELIVERY_ID\n"},
		{[]string{"lanes"}, "waybill lanes: missing TARGET: the name of a target whose ordering.mode is fifo"},
		{[]string{"redeliver", msgID, "x"}, `"x" is not a delivery id`},
		{[]string{"redispatch", "../../targets"}, "is not a message id"},
		{[]string{"redispatch", msgID, msgID2}, "too many arguments: [\"" + msgID2 + "\"]"},
		{[]string{"redispatch", "--nope", msgID}, "flag provided but not defined: -nope"},
		{[]string{"resend", msgID, "--if-version", "-2"}, "--if-version: must be positive"},
		{[]string{"replay", msgID, "--target", "billing"}, "flag provided but not defined: -target"},
		{[]string{"resend"}, "waybill resend: missing MESSAGE_ID\nusage: waybill resend MESSAGE_ID"},
		{[]string{"messages", "--server", "127.0.0.1:8080"}, `--server: "127.0.0.1:8080" is not an http:// or https:// URL`},
	} {
		args := slices.Concat(c.args, []string{"--token", "t"})
		if !slices.Contains(args, "--server") {
			args = append(args, "--server", api.URL)
		}
		code, out, errOut := waybillCLI(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if got := api.seen(); len(got) != 0 {
		t.Errorf("misuse sent requests: %+v", got)
	}
}

// tokenWarning is what a client command given --token says first.
const tokenWarning = "warning: --token shows the token to every user of this machine (ps, /proc); " +
	"set WAYBILL_TOKEN instead, or let the command read admin.token of --data-dir\n"

func TestClientTokenSources(t *testing.T) {
	// Not parallel: it sets the environment.
	api := newFakeAPI(t, map[string]answer{"GET /api/v1/messages": {200, `{"items":[],"next_cursor":null}`}})
	dir := t.TempDir()
	t.Setenv("WAYBILL_TOKEN", "")
	t.Setenv("WAYBILL_SERVER", api.URL)
	t.Setenv("WAYBILL_DATA_DIR", filepath.Join(dir, "nothing"))

	// No token anywhere.
	if code, _, errOut := waybillCLI(t, "messages"); code != 2 || !strings.Contains(errOut, "no token: pass --token or set WAYBILL_TOKEN") {
		t.Fatalf("without a token: exit %d: %s", code, errOut)
	}
	// Nor a server: that is what is said first.
	t.Setenv("WAYBILL_SERVER", "")
	if code, _, errOut := waybillCLI(t, "messages"); code != 2 || !strings.HasPrefix(errOut, "waybill messages: no server runs on --data-dir") ||
		!strings.Contains(errOut, "start one with `waybill serve`") {
		t.Fatalf("without a server: exit %d: %s", code, errOut)
	}
	t.Setenv("WAYBILL_SERVER", api.URL)
	// The server's token file, with its newline, goes only to the server
	// whose address its data directory holds.
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("wb_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := waybillCLI(t, "messages", "--data-dir", dir); code != 2 ||
		!strings.Contains(errOut, "goes only to the server running on it, and none is") {
		t.Fatalf("a token file and no server running: exit %d: %s", code, errOut)
	}
	other := newFakeAPI(t, nil)
	if err := os.WriteFile(filepath.Join(dir, "server.url"), []byte(other.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := waybillCLI(t, "messages", "--data-dir", dir); code != 2 ||
		!strings.Contains(errOut, "no token for "+api.URL) || !strings.Contains(errOut, other.URL) {
		t.Fatalf("a token file of another server: exit %d: %s", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "server.url"), []byte(api.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := waybillCLI(t, "messages", "--data-dir", dir); code != 0 {
		t.Fatalf("token file: exit %d: %s", code, errOut)
	}
	t.Setenv("WAYBILL_DATA_DIR", dir)
	if code, _, errOut := waybillCLI(t, "messages"); code != 0 {
		t.Fatalf("token file from WAYBILL_DATA_DIR: exit %d: %s", code, errOut)
	}
	// The variable wins over the file, and the flag over the variable.
	// Only the flag, which ps shows, is warned of.
	t.Setenv("WAYBILL_TOKEN", "wb_from_env")
	if code, _, errOut := waybillCLI(t, "messages"); code != 0 || errOut != "" {
		t.Fatalf("token from the environment: exit %d: %s", code, errOut)
	}
	if code, _, errOut := waybillCLI(t, "messages", "--token", "wb_from_flag"); code != 0 ||
		errOut != tokenWarning {
		t.Fatalf("token from the flag: exit %d: %s", code, errOut)
	}
	var auths []string
	for _, r := range api.seen() {
		auths = append(auths, r.Authorization)
	}
	if want := []string{"Bearer wb_from_file", "Bearer wb_from_file", "Bearer wb_from_env", "Bearer wb_from_flag"}; strings.Join(auths, ",") != strings.Join(want, ",") {
		t.Errorf("Authorization headers %q, want %q", auths, want)
	}
}

func TestClientTokenFileRefused(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, map[string]answer{"GET /api/v1/messages": {401, `{"error":{"code":"UNAUTHORIZED","message":"unknown token"}}`}})
	dir := t.TempDir()
	path := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(path, []byte("wb_stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "server.url"), []byte(api.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := waybillCLI(t, "messages", "--server", api.URL, "--data-dir", dir, "--token", "")
	if code != 1 || !strings.Contains(errOut, "the server refused the token from "+path) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestClientServerDown(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, nil)
	url := api.URL
	api.Close()
	code, _, errOut := waybillCLI(t, "messages", "--server", url, "--token", "t")
	if code != 1 || !strings.Contains(errOut, "cannot reach the server at "+url) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// TestClientServerSources: the server is --server's, else WAYBILL_SERVER's,
// else the one whose URL the data directory's server.url holds.
func TestClientServerSources(t *testing.T) {
	// Not parallel: it sets the environment.
	page := map[string]answer{"GET /api/v1/messages": {200, `{"items":[],"next_cursor":null}`}}
	fromFile, fromEnv, fromFlag := newFakeAPI(t, page), newFakeAPI(t, page), newFakeAPI(t, page)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "server.url"), []byte(fromFile.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WAYBILL_SERVER", "")
	t.Setenv("WAYBILL_DATA_DIR", dir)
	if code, _, errOut := waybillCLI(t, "messages", "--token", "t"); code != 0 {
		t.Fatalf("server from the data directory: exit %d: %s", code, errOut)
	}
	t.Setenv("WAYBILL_SERVER", fromEnv.URL)
	if code, _, errOut := waybillCLI(t, "messages", "--token", "t"); code != 0 {
		t.Fatalf("server from the environment: exit %d: %s", code, errOut)
	}
	if code, _, errOut := waybillCLI(t, "messages", "--token", "t", "--server", fromFlag.URL); code != 0 {
		t.Fatalf("server from the flag: exit %d: %s", code, errOut)
	}
	for name, f := range map[string]*fakeAPI{"the data directory's": fromFile, "the environment's": fromEnv, "the flag's": fromFlag} {
		if n := len(f.seen()); n != 1 {
			t.Errorf("%s server got %d requests, want 1", name, n)
		}
	}

	// A server.url that is not a URL is named.
	t.Setenv("WAYBILL_SERVER", "")
	path := filepath.Join(dir, "server.url")
	if err := os.WriteFile(path, []byte("127.0.0.1:8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := waybillCLI(t, "messages", "--token", "t"); code != 2 || !strings.Contains(errOut, path+`: "127.0.0.1:8080" is not an http:// or https:// URL`) {
		t.Fatalf("a bad server.url: exit %d: %s", code, errOut)
	}
}

// TestSecretsStayOutOfTheUsage: a flag that defaults to a secret from the
// environment does not show it in the usage that -help or a mistyped flag
// prints.
func TestSecretsStayOutOfTheUsage(t *testing.T) {
	// Not parallel: it sets the environment.
	t.Setenv("WAYBILL_DATABASE_URL", "postgres://waybill:S3cretPW@127.0.0.1:1/waybill")
	t.Setenv("WAYBILL_TOKEN", "wb_S3cretToken")
	for _, args := range [][]string{{"audit", "--bogus"}, {"rebuild", "-help"}, {"token", "create", "--bogus"},
		{"bench", "--bogus"}, {"messages", "--bogus"}, {"redeliver", "-help"}} {
		_, out, errOut := waybillCLI(t, args...)
		if strings.Contains(out+errOut, "S3cret") {
			t.Errorf("%v shows a secret:\n%s%s", args, out, errOut)
		}
		if !strings.Contains(errOut, "-") {
			t.Errorf("%v printed no usage:\n%s", args, errOut)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{"localhost": true, "LOCALHOST": true, "127.0.0.1": true, "127.9.9.9": true,
		"::1": true, "example.org": false, "10.0.0.1": false, "": false} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
