package httpapi_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var s lifecycle.Settings
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	if !reflect.DeepEqual(s, lifecycle.DefaultSettings()) {
		t.Errorf("settings %+v", s)
	}
	before := b.counts(t)
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 21}}).
		invalidField(t, "delivery.max_dispatches")
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": 3, "max_attempts": 1}}).
		invalidField(t, "delivery.max_attempts")
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": map[string]any{"max_dispatches": "3"}}).
		invalidField(t, "delivery.max_dispatches")
	delivery := map[string]any{"max_dispatches": 5}
	for _, tt := range []struct {
		retention map[string]any
		field     string
	}{
		{map[string]any{"payload_after": "500ms"}, "retention.payload_after"},
		{map[string]any{"payload_after": 60}, "retention.payload_after"},
		{map[string]any{"settled_after": "1h", "archive_dir": "/a", "failed_after": "30m"}, "retention.failed_after"},
		{map[string]any{"failed_after": "1h"}, "retention.failed_after"},
		{map[string]any{"settled_after": "1h"}, "retention.archive_dir"},
		{map[string]any{"settled_after": "1h", "archive_dir": "archive"}, "retention.archive_dir"},
		{map[string]any{"keep": "forever"}, "retention.keep"},
	} {
		b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": delivery, "retention": tt.retention}).
			invalidField(t, tt.field)
	}
	for _, tt := range []struct {
		console map[string]any
		field   string
	}{
		{map[string]any{"max_streams": -1}, "console.max_streams"},
		{map[string]any{"max_streams": 10001}, "console.max_streams"},
		{map[string]any{"max_streams_per_session": 65}, "console.max_streams_per_session"},
		{map[string]any{"max_streams_per_session": "4"}, "console.max_streams_per_session"},
		{map[string]any{"streams": 4}, "console.streams"},
	} {
		b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": delivery, "console": tt.console}).
			invalidField(t, tt.field)
	}
	b.unchanged(t, before)
	if s.Console.MaxStreams != 256 || s.Console.MaxStreamsPerSession != 4 {
		t.Errorf("the caps of the live histories by default: %+v", s.Console)
	}
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": delivery,
		"console": map[string]any{"max_streams": 10000, "max_streams_per_session": 1}}).want(t, http.StatusOK, &s)
	if s.Console.MaxStreams != 10000 || s.Console.MaxStreamsPerSession != 1 {
		t.Errorf("the caps of the live histories set: %+v", s.Console)
	}

	b.admin(t, http.MethodPut, "/settings", lifecycle.Settings{Delivery: lifecycle.DeliverySettings{MaxDispatches: 20}}).
		want(t, http.StatusOK, &s)
	if s.Delivery.MaxDispatches != 20 || s.Console.MaxStreams != 256 {
		t.Errorf("put answered %+v", s)
	}
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	if s.Delivery.MaxDispatches != 20 || b.changes.Load() != 2 {
		t.Errorf("settings %+v after %d changes", s, b.changes.Load())
	}

	retention := map[string]any{"payload_after": "1h", "settled_after": "72h", "failed_after": nil, "archive_dir": "/var/archive"}
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": delivery, "retention": retention}).want(t, http.StatusOK, nil)
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	if r := s.Retention; r.PayloadAfter.D() != time.Hour || r.SettledAfter.D() != 72*time.Hour || r.FailedAfter != nil || r.ArchiveDir != "/var/archive" {
		t.Errorf("retention %+v", r)
	}
	// Settings are replaced whole: without retention, nothing is removed.
	b.admin(t, http.MethodPut, "/settings", map[string]any{"delivery": delivery}).want(t, http.StatusOK, nil)
	b.as(t, readerToken, http.MethodGet, "/settings", nil).want(t, http.StatusOK, &s)
	if s.Retention.Enabled() {
		t.Errorf("retention %+v after a PUT without it", s.Retention)
	}
	// A field left out takes its default: an empty PUT restores them all.
	b.admin(t, http.MethodPut, "/settings", map[string]any{}).want(t, http.StatusOK, &s)
	if !reflect.DeepEqual(s, lifecycle.DefaultSettings()) {
		t.Errorf("an empty PUT answered %+v, want the defaults", s)
	}
}
