package targets

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// httpConfig is the configuration of an http target.
type httpConfig struct {
	// URL is where attempts are sent: http or https. Required.
	URL string `json:"url"`
	// Method defaults to POST; POST, PUT or PATCH.
	Method string `json:"method"`
	// Headers are sent with every attempt.
	Headers map[string]string `json:"headers"`
	// Timeout bounds the request; 0 leaves it to the attempt timeout.
	Timeout lifecycle.Duration `json:"timeout"`
	// TLSSkipVerify accepts any server certificate.
	TLSSkipVerify bool `json:"tls_skip_verify"`
}

var httpMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}

func (c *httpConfig) validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, &lifecycle.FieldError{Field: "config.url", Problem: "must be an absolute http:// or https:// URL"})
	}
	if c.Method == "" {
		c.Method = http.MethodPost
	}
	if !slices.Contains(httpMethods, c.Method) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.method", Problem: fmt.Sprintf("%q: allowed are POST, PUT, PATCH", c.Method)})
	}
	for name := range c.Headers {
		if name == "" || http.CanonicalHeaderKey(name) == "" {
			errs = append(errs, &lifecycle.FieldError{Field: "config.headers", Problem: fmt.Sprintf("%q is not a header name", name)})
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, &lifecycle.FieldError{Field: "config.timeout", Problem: "must not be negative"})
	}
	return errors.Join(errs...)
}

// httpTarget posts each attempt's payload to a URL.
type httpTarget struct {
	cfg    httpConfig
	client *http.Client
}

func newHTTP(t lifecycle.Target) (Deliverer, error) {
	var cfg httpConfig
	if err := decodeConfig(t.Config, &cfg); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = max(t.MaxConcurrent, 2)
	if cfg.TLSSkipVerify {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	client := &http.Client{
		Transport: transport,
		Timeout:   cfg.Timeout.D(),
		// A redirect is the receiver's answer, not a place to send the
		// payload again: it is recorded as the outcome.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &httpTarget{cfg: cfg, client: client}, nil
}

// bodyExcerpt is how much of a response body goes into the outcome text.
const bodyExcerpt = 256

// Deliver sends the payload once. 2xx is delivered; 408, 429, 5xx, time-outs
// and connection errors are failures for now (429 and 503 with their
// Retry-After); any other status fails for good.
func (h *httpTarget) Deliver(ctx context.Context, a Attempt) lifecycle.Outcome {
	req, err := http.NewRequestWithContext(ctx, h.cfg.Method, h.cfg.URL, bytes.NewReader(a.Payload))
	if err != nil {
		return lifecycle.Failed(fmt.Sprintf("build request: %v", err))
	}
	for name, value := range h.cfg.Headers {
		req.Header.Set(name, value)
	}
	if a.ContentType != "" {
		req.Header.Set("Content-Type", a.ContentType)
	}
	req.Header.Set("Waybill-Message-Id", a.MessageID.String())
	req.Header.Set("Waybill-Delivery-Id", a.DeliveryID.String())
	req.Header.Set("Waybill-Attempt", strconv.Itoa(a.Number))
	// The delivery id is stable across attempts and redeliveries, so a
	// receiver that keeps the keys it saw drops every repeat.
	req.Header.Set("Idempotency-Key", a.DeliveryID.String())

	resp, err := h.client.Do(req)
	if err != nil {
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: fmt.Sprintf("%s %s: %v", h.cfg.Method, h.cfg.URL, err)}
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, bodyExcerpt))
	// Drain a little more so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	text := resp.Status
	if s := strings.TrimSpace(strings.ToValidUTF8(string(excerpt), "?")); s != "" {
		text += ": " + s
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return lifecycle.Delivered(text)
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: text,
			RetryAt: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	default:
		return lifecycle.Failed(text)
	}
}

// retryAfter reads a Retry-After header, in seconds or as an HTTP date;
// zero when absent or unreadable.
func retryAfter(v string, now time.Time) time.Time {
	if v == "" {
		return time.Time{}
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return now.Add(time.Duration(secs) * time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		return t
	}
	return time.Time{}
}
