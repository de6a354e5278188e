package targets

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waybill/waybill/internal/tracing"
	"github.com/waybill/waybill/lifecycle"
)

// httpConfig is the configuration of an http target.
type httpConfig struct {
	// URL is where attempts are sent: http or https. Required.
	URL string `json:"url"`
	// Method defaults to POST; POST, PUT or PATCH.
	Method string `json:"method"`
	// Headers are sent with every attempt. A Content-Type here is used for
	// payloads that have none.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds the request; 0 leaves it to the attempt timeout.
	Timeout lifecycle.Duration `json:"timeout,omitzero"`
	// TLSSkipVerify accepts any server certificate.
	TLSSkipVerify bool `json:"tls_skip_verify,omitempty"`
	// ForwardHeaders are the message headers sent as request headers:
	// names, or prefixes ending in * (x-request-*), any case. Reserved
	// headers (ForwardReserved) are never sent, whatever a prefix covers.
	ForwardHeaders []string `json:"forward_headers,omitempty"`
	// PropagateBaggage sends the message's W3C baggage with each attempt,
	// when tracing is on: the sender's baggage may hold what only this
	// receiver should see.
	PropagateBaggage bool `json:"propagate_baggage,omitempty"`
}

var httpMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}

// reservedHeaders are set on every attempt by Waybill or by the HTTP
// client, so a configured value would be overwritten or dropped unseen.
// Any name starting with Waybill- is reserved too, and so are the trace
// context's (tracing.Reserved), with a problem of their own.
var reservedHeaders = []string{"Content-Length", "Host", "Idempotency-Key", "Transfer-Encoding",
	HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature}

func (c *httpConfig) check() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, &lifecycle.FieldError{Field: "config.url", Problem: fmt.Sprintf("%q is not an absolute http:// or https:// URL", c.URL)})
	}
	if c.Method == "" {
		c.Method = http.MethodPost
	}
	if !slices.Contains(httpMethods, c.Method) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.method",
			Problem: fmt.Sprintf("%q: allowed are %s", c.Method, strings.Join(httpMethods, ", "))})
	}
	errs = append(errs, checkHeaders(c.Headers)...)
	errs = append(errs, CheckHeaderPatterns("config.forward_headers", c.ForwardHeaders)...)
	if c.Timeout < 0 {
		errs = append(errs, &lifecycle.FieldError{Field: "config.timeout", Problem: fmt.Sprintf("must not be negative, got %s", c.Timeout)})
	}
	return errors.Join(errs...)
}

// checkHeaders refuses what net/http would refuse only when sending, which
// would turn a mistake in the configuration into retries, and names the
// header that is wrong.
func checkHeaders(headers map[string]string) []error {
	var errs []error
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		canonical := http.CanonicalHeaderKey(name)
		var problem string
		switch {
		case !isToken(name):
			problem = fmt.Sprintf("%q is not a header name", name)
		case slices.Contains(reservedHeaders, canonical) || strings.HasPrefix(canonical, "Waybill-"):
			problem = fmt.Sprintf("%s is set on every attempt and cannot be configured", canonical)
		case tracing.Reserved(name):
			problem = fmt.Sprintf("%s is the W3C trace context's, which Waybill sets when tracing is on, and cannot be configured", name)
		case seen[canonical] != "":
			problem = fmt.Sprintf("%q and %q are the same header", seen[canonical], name)
		case strings.ContainsFunc(headers[name], isControl):
			problem = fmt.Sprintf("the value of %s must not contain control characters", canonical)
		}
		if problem != "" {
			errs = append(errs, &lifecycle.FieldError{Field: "config.headers", Problem: problem})
		}
		seen[canonical] = name
	}
	return errs
}

// hopByHop are the headers of one connection (RFC 9110, 7.6.1), which a
// request made anew must not carry over.
var hopByHop = []string{"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
	"te", "trailer", "transfer-encoding", "upgrade"}

// ForwardReserved reports a header name (lower case) that no message header
// may set on an attempt: those Waybill or the client set, the signature's,
// the hop-by-hop headers and the trace context's.
func ForwardReserved(name string) bool {
	canonical := http.CanonicalHeaderKey(name)
	return name == "content-type" || slices.Contains(reservedHeaders, canonical) || slices.Contains(hopByHop, name) ||
		strings.HasPrefix(name, "waybill-") || strings.HasPrefix(name, "webhook-") || tracing.Reserved(name)
}

// maxForward bounds the patterns of forward_headers, as a message bounds
// its headers.
const maxForward = lifecycle.MaxHeaders

// CheckHeaderPatterns checks the header patterns of field (forward_headers,
// a webhook source's headers): names, or prefixes ending in * such as
// x-request-*, at most lifecycle.MaxHeaders. A pattern that is neither, or
// that names only reserved headers (those HeaderPatternsTake never takes),
// is a *lifecycle.FieldError on field[i].
func CheckHeaderPatterns(field string, patterns []string) []error {
	if len(patterns) > maxForward {
		return []error{&lifecycle.FieldError{Field: field,
			Problem: fmt.Sprintf("must list at most %d patterns, got %d", maxForward, len(patterns))}}
	}
	var errs []error
	for i, p := range patterns {
		field := fmt.Sprintf("%s[%d]", field, i)
		lower := strings.ToLower(p)
		name, prefix := strings.CutSuffix(lower, "*")
		var problem string
		switch {
		case !isToken(name) && !(prefix && name == ""):
			problem = fmt.Sprintf("%q is not a header name, or a prefix of one ending in * such as x-request-*", p)
		case strings.Contains(name, "*"):
			problem = fmt.Sprintf("%q may have a * only at its end", p)
		case !prefix && ForwardReserved(name),
			prefix && (strings.HasPrefix(name, "waybill-") || strings.HasPrefix(name, "webhook-")):
			problem = fmt.Sprintf("%q is reserved: content-type, content-length, host, idempotency-key, webhook-*, waybill-*, "+
				"the hop-by-hop headers and the trace context's are never forwarded nor kept from a webhook", p)
		}
		if problem != "" {
			errs = append(errs, &lifecycle.FieldError{Field: field, Problem: problem})
		}
	}
	return errs
}

// HeaderPatternsTake reports whether patterns (CheckHeaderPatterns) take the
// header name (lower case); a reserved one they never do.
func HeaderPatternsTake(patterns []string, name string) bool {
	if ForwardReserved(name) {
		return false
	}
	for _, p := range patterns {
		p = strings.ToLower(p)
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(name, prefix) || p == name {
			return true
		}
	}
	return false
}

// isToken reports whether s is an HTTP token (RFC 9110), as a header name
// must be.
func isToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// isControl reports a character a header value must not hold; a tab is
// allowed.
func isControl(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }

func checkHTTP(raw json.RawMessage) (json.RawMessage, error) {
	var cfg httpConfig
	if err := readConfig(raw, &cfg); err != nil {
		return nil, err
	}
	return json.Marshal(cfg)
}

// httpTarget sends each attempt's payload to a URL.
type httpTarget struct {
	cfg httpConfig
	// url is cfg.URL parsed, which a transform's path is appended to.
	url    *url.URL
	client *http.Client
	// correlate, when set, says where the receiver's id for the message
	// is in its answer.
	correlate *lifecycle.Correlation
	// keys sign every attempt; none for a target that does not sign.
	keys []Key
	now  func() time.Time
}

func newHTTP(t lifecycle.Target, keys []Key, now func() time.Time) (Deliverer, error) {
	var cfg httpConfig
	if err := readConfig(t.Config, &cfg); err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// Slots(t), which newHTTP cannot call: kinds, which Slots reads,
	// holds newHTTP.
	transport.MaxIdleConnsPerHost = max(t.ProcessSlots(httpSlots), 2)
	if cfg.TLSSkipVerify {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	client := &http.Client{
		Transport: tracing.Transport(transport, cfg.PropagateBaggage),
		// A redirect is the receiver's answer, not a place to send the
		// payload again: it is recorded as the outcome.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("target %s: url: %w", t.Name, err)
	}
	h := &httpTarget{cfg: cfg, url: u, client: client, keys: keys, now: now}
	if t.Receipt != nil {
		h.correlate = t.Receipt.Correlate
	}
	return h, nil
}

// errTimeout is the cause of a request's end at the target's timeout.
var errTimeout = errors.New("the target's timeout passed")

// bodyExcerpt is how much of a response body goes into the outcome text.
const bodyExcerpt = 256

// The status line's reason phrase and a redirect's Location are the
// receiver's, which the client takes up to 10 MB of; the outcome text goes
// into the journal, its projections and the event stream, so each is cut.
// A reason phrase is a few words: 256 bytes hold any that means something.
// A Location of 1 KiB shows the host and the path of any sensible
// redirect, which is what an operator reads it for.
const (
	maxReason   = 256
	maxLocation = 1024
)

// The most of an answer's body read: enough to reuse the connection, or,
// when the receiver's id is in the body, to find it there.
const (
	answerLimit     = 64 << 10
	jsonAnswerLimit = 1 << 20
)

// Deliver sends the payload once. 2xx is delivered; 408, 429, 5xx,
// time-outs and connection errors are failures for now, due at the
// response's Retry-After when it has one; 410 fails for good and disables
// the target (lifecycle.Gone); any other status, a redirect included,
// fails for good. A delivered outcome carries the receiver's id
// for the message when the target's receipt.correlate says where it is.
func (h *httpTarget) Deliver(ctx context.Context, a Attempt) lifecycle.Outcome {
	// The timeout is the request's deadline rather than the client's: a
	// client whose transport is wrapped (tracing) does not always say that
	// its own timeout passed, and the outcome should.
	if d := h.cfg.Timeout.D(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, errTimeout)
		defer cancel()
	}
	method, target := h.cfg.Method, h.cfg.URL
	if a.Method != "" {
		method = a.Method
	}
	if a.Path != "" {
		target = h.url.JoinPath(a.Path).String()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(a.Payload))
	if err != nil {
		return lifecycle.Failed(fmt.Sprintf("build request: %v", err))
	}
	// The target's own headers win over the message's.
	for name, value := range a.Headers {
		if HeaderPatternsTake(h.cfg.ForwardHeaders, name) {
			req.Header.Set(name, value)
		}
	}
	for name, value := range h.cfg.Headers {
		req.Header.Set(name, value)
	}
	for name, value := range a.SetHeaders {
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
	// Standard Webhooks: the delivery id is the webhook's id.
	SignHeaders(req.Header, h.keys, a.DeliveryID.String(), h.now(), a.Payload)

	resp, err := h.client.Do(req)
	if err != nil {
		text := RequestErrorText(err)
		if errors.Is(context.Cause(ctx), errTimeout) {
			text += fmt.Sprintf(" (the target's timeout of %s passed)", h.cfg.Timeout.D())
		}
		return lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: text}
	}
	defer resp.Body.Close()
	limit := int64(answerLimit)
	if h.correlate != nil && h.correlate.JSON != "" {
		limit = jsonAnswerLimit
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
	o := HTTPOutcome(resp, body, h.now())
	if o.Kind == lifecycle.OutcomeDelivered && h.correlate != nil {
		if id, ok := externalID(*h.correlate, resp.Header, body); ok {
			o.ExternalID = id
		} else {
			o.Text += "; no usable id for the message in the answer's " + where(*h.correlate)
		}
	}
	return o
}

// HTTPOutcome is what an answer to an HTTP attempt comes to, with body the
// start of its body (at least the first 256 bytes, when it has them): 2xx
// is delivered; 408, 429 and 5xx are failures for now, due at the
// answer's Retry-After when it has one (read against now); 410 Gone fails
// for good and disables the target, as the Standard Webhooks
// specification asks of a sender; anything else, a redirect included,
// fails for good. The outcome keeps the status code; the text is the status line, a
// redirect's location and the start of the body on one line, each cut.
func HTTPOutcome(resp *http.Response, body []byte, now time.Time) lifecycle.Outcome {
	text := responseText(resp, body)
	var o lifecycle.Outcome
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		o = lifecycle.Delivered(text)
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		o = lifecycle.Outcome{Kind: lifecycle.OutcomeRetry, Text: text, RetryAt: retryAfter(resp.Header.Get("Retry-After"), now)}
		if lifecycle.Throttles(code) && o.RetryAt.After(now) {
			o.Hold = &lifecycle.Hold{Until: o.RetryAt, Status: code}
		}
	case code == http.StatusGone:
		o = lifecycle.Gone(text)
	default:
		o = lifecycle.Failed(text)
	}
	o.StatusCode = resp.StatusCode
	return o
}

// responseText is the status line, the redirect's location if any, and
// the start of the body on one line, for the delivery's history: each cut
// (maxReason, maxLocation, bodyExcerpt), so the text has at most about
// 1.5 KiB.
func responseText(resp *http.Response, body []byte) string {
	// Status is the code, a space and the reason phrase.
	text := lifecycle.Cut(resp.Status, len("200 ")+maxReason)
	if location := resp.Header.Get("Location"); location != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		text += " to " + lifecycle.Cut(location, maxLocation)
	}
	excerpt := body[:min(len(body), bodyExcerpt)]
	if s := strings.Join(strings.Fields(strings.ToValidUTF8(string(excerpt), "?")), " "); s != "" {
		text += ": " + s
	}
	return text
}

// RequestErrorText is the text of an HTTP request's error, for an
// outcome: the client's error names the method and the URL, here without
// its user information, query and fragment (tracing.RedactURL), which may
// hold secrets that the outcome's readers (a trace collector, a callback's
// receiver) must not see; its cause, which may quote the receiver's answer
// (a malformed status line or header, up to the 10 MB of headers the
// client reads), is cut to lifecycle.MaxErrorTextLength.
func RequestErrorText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("%s %q: %s", ue.Op, tracing.RedactURL(ue.URL), lifecycle.Cut(ue.Err.Error(), lifecycle.MaxErrorTextLength))
	}
	return lifecycle.Cut(err.Error(), lifecycle.MaxErrorTextLength)
}

// externalID finds the receiver's id for the message where c says: a
// header, or a string or number at a JSON pointer into the body. An id
// that is empty, longer than lifecycle.MaxExternalIDLength, not UTF-8 or
// holds a control character is none.
func externalID(c lifecycle.Correlation, header http.Header, body []byte) (string, bool) {
	var id string
	if c.Header != "" {
		id = header.Get(c.Header)
	} else {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var doc any
		if dec.Decode(&doc) != nil {
			return "", false
		}
		switch v := pointer(doc, c.JSON).(type) {
		case string:
			id = v
		case json.Number:
			id = v.String()
		}
	}
	return id, lifecycle.CheckExternalID("", id) == nil
}

// pointer resolves a JSON pointer (RFC 6901) in a decoded document; nil
// when it names nothing.
func pointer(doc any, ptr string) any {
	for _, token := range strings.Split(ptr, "/")[1:] {
		token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		switch v := doc.(type) {
		case map[string]any:
			doc = v[token]
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(v) || token != strconv.Itoa(i) {
				return nil
			}
			doc = v[i]
		default:
			return nil
		}
	}
	return doc
}

// where says where a correlation looks, for a text.
func where(c lifecycle.Correlation) string {
	if c.Header != "" {
		return "header " + c.Header
	}
	return "body at " + c.JSON
}

// maxRetryAfter is the most seconds a Retry-After can ask for without
// overflowing a time.Duration; the retry policy caps the wait far lower.
const maxRetryAfter = math.MaxInt64 / int64(time.Second)

// retryAfter reads a Retry-After header, in seconds or as an HTTP date;
// zero when absent or unreadable.
func retryAfter(v string, now time.Time) time.Time {
	if v == "" {
		return time.Time{}
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
		return now.Add(time.Duration(min(secs, maxRetryAfter)) * time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		return t
	}
	return time.Time{}
}
