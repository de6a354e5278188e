package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
)

func TestTargets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)

	// Values that do not read come first, every one named; then every
	// problem of the values, at once, by field.
	e := b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "http",
		"config":  map[string]any{"url": "http://127.0.0.1:9/"},
		"retry":   map[string]any{"strategy": "random"},
		"receipt": map[string]any{"timeout": 30}}).invalidField(t, "receipt.timeout")
	if len(e.Details.Errors) != 2 || e.Details.Errors[1].Field != "retry.strategy" {
		t.Errorf("details %+v", e.Details)
	}
	e = b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "http",
		"config":  map[string]any{"url": "ftp://x", "method": "GET"},
		"retry":   map[string]any{"jitter": 1.5},
		"receipt": map[string]any{"timeout": "1ms"}}).fails(t, http.StatusBadRequest, httpapi.CodeInvalidField)
	fields := map[string]bool{}
	for _, p := range e.Details.Errors {
		fields[p.Field] = true
	}
	for _, f := range []string{"config.url", "config.method", "retry.jitter", "receipt.timeout"} {
		if !fields[f] {
			t.Errorf("%s not reported: %+v", f, e.Details.Errors)
		}
	}
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/"}, "retry": map[string]any{"max_attempts": 5, "backoff": "x"}}).
		invalidField(t, "retry.backoff")
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "smtp"}).invalidField(t, "kind")
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/"}, "attempt_timeout": "soon"}).invalidField(t, "attempt_timeout")
	b.unchanged(t, before)

	var created lifecycle.Target
	r := b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/"}, "receipt": map[string]any{"timeout": "1h"}}).
		want(t, http.StatusCreated, &created)
	if r.header.Get("Location") != httpapi.Prefix+"/targets/billing" || !created.Enabled || created.MaxConcurrent != 0 ||
		created.AttemptTimeout.String() != "30s" || created.Retry.Strategy != lifecycle.RetryExponential ||
		created.Receipt == nil || created.Receipt.Timeout.String() != "1h0m0s" {
		t.Errorf("created %+v", created)
	}
	var cfg map[string]any
	if err := json.Unmarshal(created.Config, &cfg); err != nil || cfg["method"] != "POST" {
		t.Errorf("config %s: defaults not filled", created.Config)
	}
	b.admin(t, http.MethodPost, "/targets", map[string]any{"name": "billing", "kind": "file", "config": map[string]any{"dir": "/tmp"}}).
		fails(t, http.StatusConflict, httpapi.CodeAlreadyExists)

	var got lifecycle.Target
	b.as(t, readerToken, http.MethodGet, "/targets/billing", nil).want(t, http.StatusOK, &got)
	if got.Name != "billing" || got.Receipt == nil || string(got.Config) != string(created.Config) {
		t.Errorf("read %+v", got)
	}

	// A replace without the name takes the path's; enabled flips; the
	// receipt left out is no receipt.
	got = lifecycle.Target{}
	b.admin(t, http.MethodPut, "/targets/billing", map[string]any{"kind": "http", "enabled": false,
		"config": map[string]any{"url": "http://127.0.0.1:9/"}}).want(t, http.StatusOK, &got)
	if got.Name != "billing" || got.Enabled || got.Receipt != nil {
		t.Errorf("replaced %+v", got)
	}
	b.admin(t, http.MethodPut, "/targets/billing", map[string]any{"name": "invoices", "kind": "http",
		"config": map[string]any{"url": "http://127.0.0.1:9/"}}).invalidField(t, "name")
	b.admin(t, http.MethodPut, "/targets/ghost", map[string]any{"kind": "file", "config": map[string]any{"dir": "/tmp"}}).
		fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.as(t, readerToken, http.MethodGet, "/targets/ghost", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	b.as(t, readerToken, http.MethodGet, "/targets/Bad%20Name", nil).invalidField(t, "name")

	var list httpapi.TargetList
	b.as(t, readerToken, http.MethodGet, "/targets", nil).want(t, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0].Name != "billing" {
		t.Errorf("list %+v", list)
	}

	// In use by a route: 409, then free.
	var rt lifecycle.Route
	b.admin(t, http.MethodPost, "/routes", httpapi.RouteRequest{Source: "erp", From: "*", To: "*", Target: "billing"}).
		want(t, http.StatusCreated, &rt)
	b.admin(t, http.MethodDelete, "/targets/billing", nil).fails(t, http.StatusConflict, httpapi.CodeTargetInUse)
	b.admin(t, http.MethodDelete, "/routes/"+rt.ID.String(), nil).want(t, http.StatusNoContent, nil)
	b.admin(t, http.MethodDelete, "/targets/billing", nil).want(t, http.StatusNoContent, nil)
	b.admin(t, http.MethodDelete, "/targets/billing", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
	if n := b.changes.Load(); n != 5 {
		t.Errorf("%d changes reported, want 5", n)
	}
}

// TestRepeatedNamesAreRefused: a name an object of the body gives twice,
// at any depth, is 400 naming it, once however often it is given, and
// nothing is written; a POST and a PUT alike.
func TestRepeatedNamesAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target(t, "billing", nil)
	before := b.counts(t)
	target := `{"name":"billing","kind":"http","config":{"url":"http://127.0.0.1:9/"},`
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		path := map[string]string{http.MethodPost: "/targets", http.MethodPut: "/targets/billing"}[method]
		b.admin(t, method, path, target+`"enabled":true,"enabled":false}`).invalidField(t, "enabled")
		e := b.admin(t, method, path, target+`"retry":{"max_attempts":5,"max_attempts":1,"max_attempts":2}}`).
			invalidField(t, "retry.max_attempts")
		if len(e.Details.Errors) != 0 || e.Details.Problem != "is given more than once" {
			t.Errorf("%s: details %+v", method, e.Details)
		}
		// Within a kind's configuration, read whole, as within the body.
		b.admin(t, method, path, `{"name":"billing","kind":"http","config":{"url":"http://127.0.0.1:9/","url":"http://127.0.0.1:8/"}}`).
			invalidField(t, "config.url")
		b.admin(t, method, path, `{"name":"billing","kind":"http","config":{"url":"http://127.0.0.1:9/","headers":{"X-A":"1","X-A":"2"}}}`).
			invalidField(t, "config.headers.X-A")
	}
	// A PUT reads its body whole first: an object within an array is
	// walked too.
	b.admin(t, http.MethodPut, "/targets/billing", target+`"labels":[{"a":1},{"b":1,"b":2}]}`).invalidField(t, "labels[1].b")
	b.admin(t, http.MethodPost, "/sources", `{"name":"drop","kind":"directory","config":{"dir":"/in","dir":"/etc","from":"a","to":"b"}}`).
		invalidField(t, "config.dir")
	b.unchanged(t, before)
}

// TestTargetEnabledByDefault: a target created without "enabled" is
// enabled, one created with false is not, and a PUT without it keeps the
// value the target has, whichever it is.
func TestTargetEnabledByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := func(name string, enabled any) map[string]any {
		s := map[string]any{"name": name, "kind": "file", "config": map[string]any{"dir": "/tmp"}}
		if enabled != nil {
			s["enabled"] = enabled
		}
		return s
	}
	// enabled sends a target and returns the answer's enabled.
	enabled := func(method, path string, body map[string]any, status int) bool {
		t.Helper()
		var got lifecycle.Target
		b.admin(t, method, path, body).want(t, status, &got)
		return got.Enabled
	}
	if !enabled(http.MethodPost, "/targets", spec("out", nil), http.StatusCreated) {
		t.Error("created without enabled: disabled")
	}
	if enabled(http.MethodPost, "/targets", spec("off", false), http.StatusCreated) {
		t.Error("created with enabled false: enabled")
	}
	for _, c := range []struct {
		name    string
		enabled any
		want    bool
	}{
		{"out", nil, true},    // kept
		{"out", false, false}, // disabled
		{"out", nil, false},   // kept
		{"off", nil, false},   // kept
		{"off", true, true},   // enabled
		{"off", nil, true},    // kept
	} {
		if got := enabled(http.MethodPut, "/targets/"+c.name, spec(c.name, c.enabled), http.StatusOK); got != c.want {
			t.Errorf("PUT %s with enabled %v: enabled %v, want %v", c.name, c.enabled, got, c.want)
		}
		var stored lifecycle.Target
		b.as(t, readerToken, http.MethodGet, "/targets/"+c.name, nil).want(t, http.StatusOK, &stored)
		if stored.Enabled != c.want {
			t.Errorf("after PUT %s with enabled %v: stored enabled %v, want %v", c.name, c.enabled, stored.Enabled, c.want)
		}
	}
}

// TestTargetLimits: a rate is refused by the field that is wrong, changing
// nothing; one accepted is shown with its burst filled, and a PUT takes
// it away. max_concurrent left out stays out (no bound across the
// cluster); given, it is kept.
func TestTargetLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.counts(t)
	spec := func(rate any) map[string]any {
		return map[string]any{"name": "paced", "kind": "http", "config": map[string]any{"url": "http://127.0.0.1:9/"}, "rate": rate}
	}
	for _, c := range []struct {
		rate  map[string]any
		field string
	}{
		{map[string]any{"per_second": 0}, "rate.per_second"},
		{map[string]any{"per_second": -1, "burst": 2}, "rate.per_second"},
		{map[string]any{"per_second": 20000}, "rate.per_second"},
		{map[string]any{"per_second": 5, "burst": -1}, "rate.burst"},
		{map[string]any{"per_second": 5, "burst": 100001}, "rate.burst"},
	} {
		b.admin(t, http.MethodPost, "/targets", spec(c.rate)).invalidField(t, c.field)
	}
	b.unchanged(t, before)

	var got lifecycle.Target
	b.admin(t, http.MethodPost, "/targets", spec(map[string]any{"per_second": 2.5})).want(t, http.StatusCreated, &got)
	if got.Rate == nil || got.Rate.PerSecond != 2.5 || got.Rate.Burst != 3 || got.MaxConcurrent != 0 {
		t.Errorf("created rate %+v, max_concurrent %d", got.Rate, got.MaxConcurrent)
	}
	b.admin(t, http.MethodGet, "/targets/paced", nil).want(t, http.StatusOK, &got)
	if got.Rate == nil || got.Rate.Burst != 3 {
		t.Errorf("shown rate %+v", got.Rate)
	}
	put := spec(nil)
	put["max_concurrent"] = 3
	var updated lifecycle.Target
	b.admin(t, http.MethodPut, "/targets/paced", put).want(t, http.StatusOK, &updated)
	if updated.Rate != nil || updated.MaxConcurrent != 3 {
		t.Errorf("rate %+v, max_concurrent %d after a PUT without a rate", updated.Rate, updated.MaxConcurrent)
	}
}
