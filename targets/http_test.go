package targets

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/waybill/waybill/lifecycle"
)

// seen is what a test server received.
type seen struct {
	method string
	path   string
	header http.Header
	body   string
}

// recorder is a test server that records every request and answers with
// respond.
type recorder struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
}

func newRecorder(t *testing.T, respond http.HandlerFunc) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(r.handler(respond))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) handler(respond http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests = append(r.requests, seen{req.Method, req.URL.Path, req.Header.Clone(), string(body)})
		r.mu.Unlock()
		respond(w, req)
	}
}

func (r *recorder) seen() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.requests...)
}

// status answers with code, body and the headers given as name, value pairs.
func status(code int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func httpConfigFor(url string, more string) string {
	return fmt.Sprintf(`{"url":%q%s}`, url, more)
}

func TestHTTPSendsThePayloadWithItsHeaders(t *testing.T) {
	srv := newRecorder(t, status(http.StatusAccepted, "queued as 17"))
	d := prepare(t, "http", httpConfigFor(srv.URL+"/in", `,"headers":{"Authorization":"Bearer t0k","x-tenant":"acme"}`))

	a := attempt(1, "<order id='1'/>")
	out := d.Deliver(t.Context(), a)
	if out.Kind != lifecycle.OutcomeDelivered || out.Text != "202 Accepted: queued as 17" {
		t.Fatalf("outcome %+v", out)
	}
	got := srv.seen()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	r := got[0]
	if r.method != http.MethodPost || r.path != "/in" || r.body != "<order id='1'/>" {
		t.Errorf("request %s %s %q", r.method, r.path, r.body)
	}
	for name, want := range map[string]string{
		"Content-Type":        "application/xml",
		"Waybill-Message-Id":  a.MessageID.String(),
		"Waybill-Delivery-Id": a.DeliveryID.String(),
		"Waybill-Attempt":     "1",
		"Idempotency-Key":     a.DeliveryID.String(),
		"Authorization":       "Bearer t0k",
		"X-Tenant":            "acme",
	} {
		if v := r.header.Get(name); v != want {
			t.Errorf("%s: %q, want %q", name, v, want)
		}
	}
}

// TestHTTPForwardsMessageHeaders: the message headers forward_headers
// names arrive, the target's own win, and reserved ones never do, whatever
// a prefix covers.
func TestHTTPForwardsMessageHeaders(t *testing.T) {
	srv := newRecorder(t, status(http.StatusOK, ""))
	d := prepare(t, "http", httpConfigFor(srv.URL, `,"headers":{"X-Tenant":"own"},"forward_headers":["X-Tenant","x-request-*","c*","w*","i*","t*","h*"]`))
	a := attempt(1, "x")
	a.Headers = map[string]string{"x-tenant": "acme", "x-request-id": "r1", "x-request-path": "/a", "x-other": "no",
		"content-type": "text/evil", "connection": "close", "waybill-attempt": "9", "webhook-signature": "v1,forged",
		"idempotency-key": "k", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "host": "evil"}
	if out := d.Deliver(t.Context(), a); out.Kind != lifecycle.OutcomeDelivered {
		t.Fatalf("outcome %+v", out)
	}
	h := srv.seen()[0].header
	for name, want := range map[string]string{
		"X-Tenant": "own", "X-Request-Id": "r1", "X-Request-Path": "/a", "X-Other": "",
		"Content-Type": "application/xml", "Waybill-Attempt": "1", "Webhook-Signature": "",
		"Idempotency-Key": a.DeliveryID.String(), "Traceparent": "",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

func TestHTTPMethodAndContentTypeFallback(t *testing.T) {
	srv := newRecorder(t, status(http.StatusOK, ""))
	d := prepare(t, "http", httpConfigFor(srv.URL, `,"method":"PUT","headers":{"Content-Type":"text/plain"}`))
	a := attempt(1, "x")
	a.ContentType = ""
	if out := d.Deliver(t.Context(), a); out.Kind != lifecycle.OutcomeDelivered || out.Text != "200 OK" {
		t.Fatalf("outcome %+v", out)
	}
	a.ContentType = "application/json"
	d.Deliver(t.Context(), a)
	got := srv.seen()
	if got[0].method != http.MethodPut || got[0].header.Get("Content-Type") != "text/plain" ||
		got[1].header.Get("Content-Type") != "application/json" {
		t.Errorf("requests %+v", got)
	}
}

func TestHTTPIdempotencyKeyIsStableAcrossAttempts(t *testing.T) {
	srv := newRecorder(t, status(http.StatusServiceUnavailable, "busy"))
	d := prepare(t, "http", httpConfigFor(srv.URL, ""))
	for n := 1; n <= 3; n++ {
		a := attempt(n, "same")
		a.Redelivered = n == 3
		d.Deliver(t.Context(), a)
	}
	other := attempt(1, "same")
	other.DeliveryID = other.MessageID // any other delivery
	d.Deliver(t.Context(), other)

	got := srv.seen()
	key := got[0].header.Get("Idempotency-Key")
	for i, r := range got[:3] {
		if r.header.Get("Idempotency-Key") != key || r.header.Get("Waybill-Attempt") != fmt.Sprint(i+1) {
			t.Errorf("attempt %d: key %q, attempt %q", i+1, r.header.Get("Idempotency-Key"), r.header.Get("Waybill-Attempt"))
		}
	}
	if got[3].header.Get("Idempotency-Key") == key {
		t.Error("another delivery has the same key")
	}
}

func TestHTTPStatusOutcomes(t *testing.T) {
	tests := []struct {
		code int
		want lifecycle.OutcomeKind
		gone bool
	}{
		{200, lifecycle.OutcomeDelivered, false},
		{201, lifecycle.OutcomeDelivered, false},
		{204, lifecycle.OutcomeDelivered, false},
		{299, lifecycle.OutcomeDelivered, false},
		{408, lifecycle.OutcomeRetry, false},
		{429, lifecycle.OutcomeRetry, false},
		{500, lifecycle.OutcomeRetry, false},
		{502, lifecycle.OutcomeRetry, false},
		{503, lifecycle.OutcomeRetry, false},
		{504, lifecycle.OutcomeRetry, false},
		{400, lifecycle.OutcomeFailed, false},
		{401, lifecycle.OutcomeFailed, false},
		{403, lifecycle.OutcomeFailed, false},
		{404, lifecycle.OutcomeFailed, false},
		{409, lifecycle.OutcomeFailed, false},
		{410, lifecycle.OutcomeFailed, true},
		{413, lifecycle.OutcomeFailed, false},
		{422, lifecycle.OutcomeFailed, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			body := ""
			if tt.code != http.StatusNoContent {
				body = fmt.Sprintf("reason %d", tt.code)
			}
			srv := newRecorder(t, status(tt.code, body))
			out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p"))
			if out.Kind != tt.want || !out.RetryAt.IsZero() || out.Gone != tt.gone {
				t.Fatalf("outcome %+v, want %s, gone %t", out, tt.want, tt.gone)
			}
			if !strings.HasPrefix(out.Text, fmt.Sprint(tt.code)) || !strings.Contains(out.Text, body) {
				t.Errorf("text %q has not the status and the body", out.Text)
			}
		})
	}
}

func TestHTTPRedirectIsNotFollowed(t *testing.T) {
	elsewhere := newRecorder(t, status(http.StatusOK, ""))
	for _, code := range []int{301, 302, 303, 307, 308} {
		srv := newRecorder(t, status(code, "moved", "Location", elsewhere.URL+"/new"))
		out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p"))
		if out.Kind != lifecycle.OutcomeFailed || !strings.HasPrefix(out.Text, fmt.Sprint(code)) ||
			!strings.Contains(out.Text, elsewhere.URL+"/new") || !strings.Contains(out.Text, "moved") {
			t.Errorf("%d: outcome %+v", code, out)
		}
	}
	if n := len(elsewhere.seen()); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

func TestHTTPOutcomeTextHoldsTheStartOfTheBody(t *testing.T) {
	long := strings.Repeat("0123456789", 1000)
	srv := newRecorder(t, status(http.StatusBadRequest, "line one\n\tline two  "+long))
	out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p"))
	if !strings.HasPrefix(out.Text, "400 Bad Request: line one line two 0123456789") {
		t.Errorf("text %q", out.Text)
	}
	if len(out.Text) > len("400 Bad Request: ")+bodyExcerpt {
		t.Errorf("text of %d bytes", len(out.Text))
	}
}

// raw answers with head, written as it is on the connection, then closes
// it: a status line and headers no http.ResponseWriter would write.
func raw(t *testing.T, head string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString(head)
		_ = buf.Flush()
	}
}

// TestHTTPOutcomeTextIsBounded: a receiver's reason phrase and Location of
// megabytes, and a status line the client cannot read, give an outcome
// text of a small known size, valid UTF-8 and marked where it was cut.
func TestHTTPOutcomeTextIsBounded(t *testing.T) {
	huge := strings.Repeat("é", 1<<20) // 2 MB, of characters of two bytes
	tests := []struct {
		name, head string
		kind       lifecycle.OutcomeKind
		start      string
		most       int
	}{
		{"redirect", "HTTP/1.1 302 " + huge + "\r\nLocation: https://elsewhere.example/" + huge +
			"\r\nContent-Length: 5\r\nConnection: close\r\n\r\nmoved", lifecycle.OutcomeFailed, "302 éé",
			len("302 ") + maxReason + len(" to ") + maxLocation + len(": moved")},
		{"malformed status line", "HTTP/1.1 " + huge + "\r\n\r\n", lifecycle.OutcomeRetry, "Post ",
			1024 + lifecycle.MaxErrorTextLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRecorder(t, raw(t, tt.head))
			out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p"))
			if out.Kind != tt.kind || !strings.HasPrefix(out.Text, tt.start) || len(out.Text) > tt.most ||
				!utf8.ValidString(out.Text) || !strings.Contains(out.Text, "é"+lifecycle.CutMark) {
				t.Errorf("outcome %s of %d bytes: %.300q…", out.Kind, len(out.Text), out.Text)
			}
			if tt.kind == lifecycle.OutcomeFailed && !strings.Contains(out.Text, " to https://elsewhere.example/éé") {
				t.Errorf("the redirect's location is not in %.300q…", out.Text)
			}
		})
	}
}

// TestHTTPRetryAfter: a Retry-After is read against the target's clock,
// not the machine's: seconds count from the clock, and an HTTP date is the
// time it names, in the clock's future though the machine's past.
func TestHTTPRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		code   int
		header string
		want   time.Time
	}{
		{"seconds", 503, "120", clockTime.Add(120 * time.Second)},
		{"zero seconds", 429, "0", clockTime},
		{"HTTP-date", 429, clockTime.Add(time.Hour).Format(http.TimeFormat), clockTime.Add(time.Hour)},
		{"seconds on a 502", 502, "30", clockTime.Add(30 * time.Second)},
		{"HTTP-date on a 504", 504, clockTime.Add(time.Minute).Format(http.TimeFormat), clockTime.Add(time.Minute)},
		{"HTTP-date before the clock", 503, clockTime.Add(-time.Hour).Format(http.TimeFormat), clockTime.Add(-time.Hour)},
		{"unreadable", 503, "soon", time.Time{}},
		{"negative", 503, "-5", time.Time{}},
		{"absent", 500, "", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRecorder(t, status(tt.code, "", "Retry-After", tt.header))
			out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p"))
			if out.Kind != lifecycle.OutcomeRetry || !out.RetryAt.Equal(tt.want) {
				t.Errorf("outcome %+v, want a retry at %v", out, tt.want)
			}
		})
	}
	// A failure for good has no retry time, whatever the server says.
	for _, code := range []int{400, 410} {
		srv := newRecorder(t, status(code, "", "Retry-After", "60"))
		if out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p")); out.Kind != lifecycle.OutcomeFailed || !out.RetryAt.IsZero() {
			t.Errorf("%d with Retry-After: %+v", code, out)
		}
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"", time.Time{}},
		{"0", now},
		{"30", now.Add(30 * time.Second)},
		{"Sun, 01 Mar 2026 13:00:00 GMT", now.Add(time.Hour)},
		{"Sunday, 01-Mar-26 13:00:00 GMT", now.Add(time.Hour)},
		{"Sun Mar  1 13:00:00 2026", now.Add(time.Hour)},
		{"1.5", time.Time{}},
		{"-1", time.Time{}},
		{"tomorrow", time.Time{}},
		{"9223372036854775807", now.Add(time.Duration(maxRetryAfter) * time.Second)},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.in, now); !got.Equal(tt.want) {
			t.Errorf("retryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := retryAfter("9223372036854775807", now); got.Before(now) {
		t.Errorf("a huge Retry-After wrapped to %v", got)
	}
}

// stalled is a server that answers nothing until the request is given up
// or the test ends.
func stalled(t *testing.T) *recorder {
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close
	return srv
}

func TestHTTPTimeoutsAreRetries(t *testing.T) {
	t.Run("attempt deadline", func(t *testing.T) {
		srv := stalled(t)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(ctx, attempt(1, "p"))
		if out.Kind != lifecycle.OutcomeRetry || !strings.Contains(out.Text, "deadline exceeded") {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("config timeout", func(t *testing.T) {
		srv := stalled(t)
		out := prepare(t, "http", httpConfigFor(srv.URL, `,"timeout":"50ms"`)).Deliver(t.Context(), attempt(1, "p"))
		if out.Kind != lifecycle.OutcomeRetry || !strings.Contains(out.Text, "timeout of 50ms passed") {
			t.Errorf("outcome %+v", out)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		srv := newRecorder(t, status(200, ""))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(ctx, attempt(1, "p"))
		if out.Kind != lifecycle.OutcomeRetry || !strings.Contains(out.Text, "canceled") || len(srv.seen()) != 0 {
			t.Errorf("outcome %+v after %d requests", out, len(srv.seen()))
		}
	})
}

func TestHTTPConnectionErrorIsARetry(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1)
	srv.Close()
	out := prepare(t, "http", httpConfigFor(url+"/in?token=t0ken#frag", "")).Deliver(t.Context(), attempt(1, "p"))
	if out.Kind != lifecycle.OutcomeRetry || !out.RetryAt.IsZero() || !strings.Contains(out.Text, "refused") ||
		!strings.Contains(out.Text, strings.TrimPrefix(srv.URL, "http://")+`/in"`) {
		t.Errorf("outcome %+v", out)
	}
	// The text goes to traces and callbacks: nothing of the URL that may
	// be a secret is in it.
	for _, secret := range []string{"s3cret", "user", "t0ken", "frag"} {
		if strings.Contains(out.Text, secret) {
			t.Errorf("%q is in %q", secret, out.Text)
		}
	}
}

func TestHTTPTLSVerification(t *testing.T) {
	srv := &recorder{}
	srv.Server = httptest.NewTLSServer(srv.handler(status(http.StatusOK, "")))
	t.Cleanup(srv.Close)

	out := prepare(t, "http", httpConfigFor(srv.URL, "")).Deliver(t.Context(), attempt(1, "p"))
	if out.Kind != lifecycle.OutcomeRetry || !strings.Contains(out.Text, "certificate") {
		t.Errorf("unverifiable certificate: %+v", out)
	}
	if n := len(srv.seen()); n != 0 {
		t.Errorf("%d requests reached the server without verification", n)
	}
	out = prepare(t, "http", httpConfigFor(srv.URL, `,"tls_skip_verify":true`)).Deliver(t.Context(), attempt(1, "p"))
	if out.Kind != lifecycle.OutcomeDelivered || len(srv.seen()) != 1 {
		t.Errorf("tls_skip_verify: %+v", out)
	}
}

func TestHTTPConcurrentAttempts(t *testing.T) {
	srv := newRecorder(t, status(http.StatusOK, "ok"))
	d := prepare(t, "http", httpConfigFor(srv.URL, ""))
	var wg sync.WaitGroup
	for n := 1; n <= 20; n++ {
		wg.Go(func() {
			if out := d.Deliver(t.Context(), attempt(n, "p")); out.Kind != lifecycle.OutcomeDelivered {
				t.Errorf("attempt %d: %+v", n, out)
			}
		})
	}
	wg.Wait()
	if n := len(srv.seen()); n != 20 {
		t.Errorf("%d requests", n)
	}
}
