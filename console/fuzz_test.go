package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// The fuzz targets of the console's forms and queries, which a browser
// sends as it likes.

// FuzzFilterForm reads the messages list's query: an accepted filter is
// checked as the API checks it, and the form it shows reads back to it.
func FuzzFilterForm(f *testing.F) {
	cursor := projection.Cursor{CreatedAt: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}.String()
	for _, s := range []string{
		"",
		"status=error&source=erp&target=out",
		"ordering_key=+customer+7+&possible_duplicate=true",
		"created_after=2026-12-01T08:00&created_before=2026-12-01T09:00:30",
		"created_after=2026-12-01T08:00:00%2B01:00&cursor=" + cursor,
		"status=nope&possible_duplicate=false&created_before=yesterday",
		"source=Bad+Name&ordering_key=%00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return // the handler reads what Go parsed of it, as here
		}
		mf, form, err := parseFilter(q)
		if err != nil {
			return
		}
		if mf.Source != "" && lifecycle.CheckName("source", mf.Source) != nil ||
			mf.Target != "" && lifecycle.CheckName("target", mf.Target) != nil ||
			lifecycle.CheckOrderingKey("ordering_key", mf.OrderingKey) != nil || mf.Limit != pageSize {
			t.Fatalf("%q accepted as %+v", raw, mf)
		}
		for _, at := range []time.Time{mf.CreatedAfter, mf.CreatedBefore} {
			if at.Location() != time.UTC {
				t.Fatalf("time %s not in UTC", at)
			}
		}
		again, _, err := parseFilter(form.values())
		mf.After = nil
		if err != nil || !reflect.DeepEqual(again, mf) {
			t.Fatalf("the form of %q reads back as %+v, %v; want %+v", raw, again, err, mf)
		}
	})
}

// FuzzSigninNext holds the sign-in's return address, which a link may
// set to anything, to a page of the console: never another site.
func FuzzSigninNext(f *testing.F) {
	for _, s := range []string{"/ui/messages?status=error", "/ui/", "//evil.example/ui/", "https://evil.example/ui/",
		"/ui/../admin", `/ui/\evil`, "/ui/%2e%2e/x", "javascript:alert(1)", "/ui//evil.example", "", "/ui/messages/#frag"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		to := localNext(next)
		u, err := url.Parse(to)
		if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(to, Prefix) ||
			strings.HasPrefix(to, "//") || strings.Contains(to, `\`) {
			t.Fatalf("%q leads to %q", next, to)
		}
		if r, err := http.NewRequest(http.MethodGet, "http://127.0.0.1"+to, nil); err != nil || r.URL.Host != "127.0.0.1" {
			t.Fatalf("%q leads to %q, which leaves the console's host", next, to)
		}
	})
}

// FuzzConfigForms reads the forms of a target, a source and the
// settings: an accepted form is one the page shows again as it was read.
func FuzzConfigForms(f *testing.F) {
	for _, s := range []string{
		"name=out&enabled=on&max_concurrent=4&attempt_timeout=30s&retry.strategy=exponential&retry.base_delay=1s" +
			"&retry.max_delay=5m&retry.jitter=0.2&retry.max_attempts=8&retry.max_age=24h&receipt.timeout=10m" +
			"&ordering.mode=fifo&ordering.on_failure=block&ordering.head_alert_after=15m" +
			"&config.url=https%3A%2F%2Fexample.com%2Fin&config.method=PUT&config.headers=Authorization%3A+Bearer+x%0AX-A%3A+1" +
			"&config.timeout=10s&config.tls_skip_verify=on",
		"name=files&config.dir=%2Ftmp%2Fout&config.extension=xml&config.overwrite=on&retry.jitter=nan",
		"name=drop&config.dir=%2Fsrv%2Fin&config.pattern=*.xml&config.from=acme&config.to=globex&config.after=delete",
		"name=up&config.database_url=postgres%3A%2F%2Fu%3Ap%40127.0.0.1%2Fdb&config.table=inbox&config.batch=100",
		"delivery.max_dispatches=5&operations.rate=200&retention.payload_after=720h&retention.settled_after=&retention.archive_dir=%2Fa",
		"config.headers=no+colon%0A%3A+empty&max_concurrent=x&retention.failed_after=soon",
	} {
		for kind := range 4 {
			f.Add(uint8(kind), s)
		}
	}
	targetKindNames, sourceKindNames := kindNames(targetKinds), kindNames(sourceKinds)
	f.Fuzz(func(t *testing.T, kind uint8, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		tk := targetKindNames[int(kind)%len(targetKindNames)]
		if def, err := readTargetForm(tk, form).definition(tk); err == nil {
			a, err := json.Marshal(def.WithDefaults())
			if err != nil {
				// Such as a jitter of NaN, which the Writer's check
				// refuses.
				if def.WithDefaults().Validate() == nil {
					t.Fatalf("target form %q: a target that validates and has no JSON: %v", raw, err)
				}
			} else {
				again, err := formOf(def).definition(tk)
				b, _ := json.Marshal(again.WithDefaults())
				if err != nil || !sameJSON(a, b) {
					t.Fatalf("target form %q: %s shown and read again as %s, %v", raw, a, b, err)
				}
			}
		}
		sk := sourceKindNames[int(kind)%len(sourceKindNames)]
		fields := sourceKinds[sk]
		if config, err := readSourceForm(sk, form).Config.config(fields); err == nil {
			again, err := valuesOf(fields, config).config(fields)
			if err != nil || !sameJSON(config, again) {
				t.Fatalf("source form %q: %s shown and read again as %s, %v", raw, config, again, err)
			}
		}
		r := &http.Request{PostForm: form}
		var (
			n    int
			text string
			p    *lifecycle.Duration
		)
		if err := wholeNumber(r, "delivery.max_dispatches", &text, &n); err == nil && form.Has("delivery.max_dispatches") {
			if text != strings.TrimSpace(form.Get("delivery.max_dispatches")) {
				t.Fatalf("number %q shown as %q", form.Get("delivery.max_dispatches"), text)
			}
		}
		if err := retentionPeriod(r, "retention.payload_after", &text, &p); err == nil && p != nil {
			back := &http.Request{PostForm: url.Values{"retention.payload_after": {period(p)}}}
			var q *lifecycle.Duration
			if err := retentionPeriod(back, "retention.payload_after", &text, &q); err != nil || q == nil || *q != *p {
				t.Fatalf("period %q shown as %q, read back as %v, %v", form.Get("retention.payload_after"), period(p), q, err)
			}
		}
	})
}

// sameJSON reports whether two JSON texts hold the same value, whatever
// their escapes.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
