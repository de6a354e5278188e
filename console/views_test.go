package console

import (
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

func TestEveryStatusAndStateHasATone(t *testing.T) {
	t.Parallel()
	want := map[lifecycle.MessageStatus]string{
		lifecycle.StatusReceived: "info", lifecycle.StatusInProgress: "info", lifecycle.StatusRetrying: "warn",
		lifecycle.StatusAwaitingReceipt: "info", lifecycle.StatusStalled: "warn", lifecycle.StatusDelivered: "ok",
		lifecycle.StatusNotRouted: "neutral", lifecycle.StatusRefused: "bad", lifecycle.StatusError: "bad",
		lifecycle.StatusBlocked: "warn", lifecycle.StatusSkipped: "neutral", lifecycle.StatusScheduled: "info",
	}
	for _, s := range lifecycle.MessageStatuses {
		if got := statusTone(s); got != want[s] {
			t.Errorf("status %s: tone %q, want %q", s, got, want[s])
		}
	}
	wantState := map[lifecycle.DeliveryState]string{
		lifecycle.StateQueued: "info", lifecycle.StateDelivering: "info", lifecycle.StateRetrying: "warn",
		lifecycle.StateAwaitingAck: "info", lifecycle.StateDelivered: "ok", lifecycle.StateFailed: "bad",
		lifecycle.StateStalled: "warn", lifecycle.StateBlocked: "warn", lifecycle.StateSkipped: "neutral", lifecycle.StateSuperseded: "neutral",
		lifecycle.StateScheduled: "info",
	}
	for _, s := range lifecycle.DeliveryStates {
		if got := stateTone(s); got != wantState[s] {
			t.Errorf("state %s: tone %q, want %q", s, got, wantState[s])
		}
		label := redeliveryLabel(s)
		again := s == lifecycle.StateDelivered || s == lifecycle.StateSkipped
		switch {
		case again && label != "Send again",
			!again && lifecycle.RedeliverRule.Admits(s) && label != "Redeliver",
			!lifecycle.RedeliverRule.Admits(s) && label != "":
			t.Errorf("state %s: action %q", s, label)
		}
	}
}

func TestEveryOperationStateHasAToneAndALabel(t *testing.T) {
	t.Parallel()
	want := map[lifecycle.OperationState]string{lifecycle.OperationRunning: "info", lifecycle.OperationDone: "ok",
		lifecycle.OperationCancelled: "warn", lifecycle.OperationFailed: "bad"}
	for _, s := range lifecycle.OperationStates {
		if got := operationTone(s); got != want[s] {
			t.Errorf("operation state %s: tone %q, want %q", s, got, want[s])
		}
		if s.Label() == string(s) {
			t.Errorf("operation state %s has no label", s)
		}
	}
}

func TestFilterText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		f    lifecycle.OperationFilter
		want string
	}{
		{lifecycle.OperationFilter{Target: "billing"}, "a delivery to billing"},
		{lifecycle.OperationFilter{Status: []lifecycle.MessageStatus{lifecycle.StatusError, lifecycle.StatusStalled}, Source: "erp"},
			"status Error or Stalled; source erp"},
		{lifecycle.OperationFilter{CreatedAfter: at, CreatedBefore: at.Add(time.Hour)},
			"created after 2026-12-01T22:00:00Z; created before 2026-12-01T23:00:00Z"},
	} {
		if got := filterText(tc.f); got != tc.want {
			t.Errorf("filterText(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

func TestFigures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want string
	}{
		{count(0), "0"}, {count(999), "999"}, {count(1000), "1,000"}, {count(1234567), "1,234,567"}, {count(-1000), "-1,000"},
		{size(5), "5 bytes"}, {size(2048), "2.0 KiB (2,048 bytes)"}, {size(3 << 20), "3.0 MiB (3,145,728 bytes)"},
		{duration(1500 * time.Microsecond), "2ms"}, {duration(90*time.Second + 400*time.Millisecond), "1m30s"},
		{short(strings.Repeat("é", 160)), strings.Repeat("é", 160)},
		{short(strings.Repeat("é", 161)), strings.Repeat("é", 159) + "…"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestLocalNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"":                           "/ui/",
		"/ui/messages?status=error":  "/ui/messages?status=error",
		"/ui/messages/x#history":     "/ui/messages/x",
		"/api/v1/stats":              "/ui/",
		"https://evil.example/ui/":   "/ui/",
		"//evil.example/ui/":         "/ui/",
		`/ui/\\evil.example`:         "/ui/",
		"/ui":                        "/ui/",
		"javascript:alert(1)":        "/ui/",
		"/ui/../api/v1/stats":        "/ui/",
		"/ui/./messages":             "/ui/",
		"%zz":                        "/ui/",
		"/ui/targets/billing/edit?x": "/ui/targets/billing/edit?x",
	} {
		if got := localNext(next); got != want {
			t.Errorf("localNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestParseFormTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC)
	for v, want := range map[string]time.Time{
		"2026-12-01T08:30":          at,
		"2026-12-01T08:30:00":       at,
		"2026-12-01T08:30:00Z":      at,
		"2026-12-01T09:30:00+01:00": at,
	} {
		got, err := parseFormTime("created_after", v)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%q: %v, %v", v, got, err)
		}
	}
	for _, v := range []string{"yesterday", "2026-12-01", "01/12/2026 08:30"} {
		if _, err := parseFormTime("created_after", v); err == nil || !strings.HasPrefix(err.Error(), "created_after: ") {
			t.Errorf("%q: %v", v, err)
		}
	}
	if got := formTime(at.In(time.FixedZone("x", 3600))); got != "2026-12-01T08:30:00" {
		t.Errorf("formTime %q", got)
	}
}

func TestSSEData(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"one":                   "data: one\n",
		"<tr>\n<td>\r\n</tr>\n": "data: <tr>\ndata: <td>\ndata: </tr>\n",
	} {
		if got := sseData(in); got != want {
			t.Errorf("sseData(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPreviewOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		size   int64
		isText bool
		shown  string
	}{
		{"hello\n\tworld\r\n", 15, true, "hello\n\tworld\r\n"},
		{"a\x00b", 3, false, ""},
		{"a\x1bb", 3, false, ""},
		{"\xff\xfe", 2, false, ""},
		{"ab\xc3", 4, true, "ab"},     // é cut in two by the preview
		{"ab\xc3", 3, false, ""},      // the whole payload: not UTF-8
		{"ab\xe2\x82", 5, true, "ab"}, // € cut after two of its bytes
	} {
		p := previewOf(projection.Payload{Body: []byte(tc.body), Size: tc.size})
		if p.IsText != tc.isText || p.Text != tc.shown || p.Shown != int64(len(tc.shown)) {
			t.Errorf("%q of %d: %+v", tc.body, tc.size, p)
		}
	}
}

func TestNewRefusesABadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{SessionTTL: time.Second, LivePoll: time.Hour})
	for _, want := range []string{"Config.Writer is required", "Config.DB is required", "Config.Tokens is required",
		"Config.SessionTTL is 1s", "Config.LivePoll is 1h0m0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New's error %v lacks %q", err, want)
		}
	}
}
