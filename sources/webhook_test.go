package sources_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// The providers' own examples.
const (
	// The Standard Webhooks specification's test vector.
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = 1614265330
	swBody      = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// GitHub's documentation's example of X-Hub-Signature-256.
	ghSecret    = "It's a Secret to Everybody"
	ghBody      = "Hello, World!"
	ghSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	// A Stripe endpoint's secret, used as it is written.
	stripeSecret = "whsec_test_secret"
)

// webhook prepares a webhook source of the configuration.
func webhook(t testing.TB, config string) sources.WebhookConfig {
	t.Helper()
	s, err := sources.Prepare(lifecycle.Source{Name: "hooks", Kind: sources.KindWebhook, Config: json.RawMessage(config)})
	if err != nil {
		t.Fatalf("%s: %v", config, err)
	}
	c, err := sources.Webhook(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// stripeSignature signs as Stripe documents it: t=<time>,v1=<hex of the
// HMAC-SHA256 of "<time>.<body>" under the secret as written>.
func stripeSignature(secret string, at int64, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", at, body)
	return fmt.Sprintf("t=%d,v1=%s", at, hex.EncodeToString(m.Sum(nil)))
}

// TestWebhookSchemesVerify holds each scheme to its provider's examples:
// a request signed right verifies and names its id and type; a wrong
// secret, a body changed by one byte, a timestamp six minutes off (where
// the scheme signs one) and a missing header are refused, each for its
// reason.
func TestWebhookSchemesVerify(t *testing.T) {
	t.Parallel()
	swAt := time.Unix(swTimestamp, 0)
	stripeAt := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	stripeBody := `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"invoice.created"}`
	shopify := func(secret, body string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(body))
		return base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	sha1Hex := func(secret, body string) string {
		m := hmac.New(sha1.New, []byte(secret))
		m.Write([]byte(body))
		return "sha1=" + hex.EncodeToString(m.Sum(nil))
	}
	sw := `{"verify": {"scheme": "standard-webhooks", "secret": "` + swSecret + `"}}`
	swRotated := `{"verify": {"scheme": "standard-webhooks", "secrets": ["whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "` + swSecret + `"]}}`
	gh := `{"verify": {"scheme": "github", "secret": "` + ghSecret + `"}}`
	stripe := `{"verify": {"scheme": "stripe", "secret": "` + stripeSecret + `"}}`
	shop := `{"verify": {"scheme": "hmac", "header": "X-Shopify-Hmac-Sha256", "encoding": "base64", "secret": "shpss_1", "id_header": "X-Shopify-Webhook-Id"}}`
	legacy := `{"verify": {"scheme": "hmac", "header": "X-Signature", "algorithm": "sha1", "prefix": "sha1=", "secret": "s3"}}`
	for _, tc := range []struct {
		name, config string
		h            http.Header
		body         string
		now          time.Time
		want         sources.Inbound
		reason       string
	}{
		{"standard-webhooks: the specification's vector", sw,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", swSignature),
			swBody, swAt, sources.Inbound{ID: swID}, ""},
		{"standard-webhooks: one of several signatures, the sender's second secret", swRotated,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", "v1a,AAAA v1,bm9wZQ== "+swSignature),
			swBody, swAt.Add(4 * time.Minute), sources.Inbound{ID: swID}, ""},
		{"standard-webhooks: the body's type", `{"verify": {"scheme": "standard-webhooks", "secret": "` + swSecret + `"}}`,
			nil, "", swAt, sources.Inbound{}, ""}, // filled below
		{"standard-webhooks: a wrong secret", `{"verify": {"scheme": "standard-webhooks", "secret": "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}`,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", swSignature),
			swBody, swAt, sources.Inbound{}, sources.RefusedSignature},
		{"standard-webhooks: a byte changed", sw,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", swSignature),
			`{"test": 2432232315}`, swAt, sources.Inbound{}, sources.RefusedSignature},
		{"standard-webhooks: another id", sw,
			headers("webhook-id", swID+"x", "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", swSignature),
			swBody, swAt, sources.Inbound{}, sources.RefusedSignature},
		{"standard-webhooks: six minutes old", sw,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", swSignature),
			swBody, swAt.Add(6 * time.Minute), sources.Inbound{}, sources.RefusedTimestamp},
		{"standard-webhooks: six minutes ahead", sw,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp), "webhook-signature", swSignature),
			swBody, swAt.Add(-6 * time.Minute), sources.Inbound{}, sources.RefusedTimestamp},
		{"standard-webhooks: far ahead", sw,
			headers("webhook-id", swID, "webhook-timestamp", "9223372036854775807", "webhook-signature", swSignature),
			swBody, swAt, sources.Inbound{}, sources.RefusedTimestamp},
		{"standard-webhooks: no signature", sw,
			headers("webhook-id", swID, "webhook-timestamp", fmt.Sprint(swTimestamp)),
			swBody, swAt, sources.Inbound{}, sources.RefusedMissingHeader},

		{"github: the documentation's example", gh,
			headers("X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-GitHub-Event", "issues"),
			ghBody, swAt, sources.Inbound{ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Type: "issues"}, ""},
		{"github: an event type that is no message type is left out", gh,
			headers("X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "d1", "X-GitHub-Event", "is sues"),
			ghBody, swAt, sources.Inbound{ID: "d1"}, ""},
		{"github: a wrong secret", `{"verify": {"scheme": "github", "secret": "It's a Secret to Nobody"}}`,
			headers("X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "d1"), ghBody, swAt, sources.Inbound{}, sources.RefusedSignature},
		{"github: a byte changed", gh,
			headers("X-Hub-Signature-256", ghSignature, "X-GitHub-Delivery", "d1"), "Hello, World?", swAt, sources.Inbound{}, sources.RefusedSignature},
		{"github: the SHA-1 header only", gh,
			headers("X-Hub-Signature", "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59", "X-GitHub-Delivery", "d1"), ghBody, swAt,
			sources.Inbound{}, sources.RefusedMissingHeader},
		{"github: no delivery id", gh, headers("X-Hub-Signature-256", ghSignature), ghBody, swAt, sources.Inbound{}, sources.RefusedMissingHeader},

		{"stripe: signed as documented", stripe,
			headers("Stripe-Signature", stripeSignature(stripeSecret, stripeAt.Unix(), stripeBody)+",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"),
			stripeBody, stripeAt, sources.Inbound{ID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", Type: "invoice.created"}, ""},
		{"stripe: two v1 during a roll, the second right", stripe,
			headers("Stripe-Signature", fmt.Sprintf("t=%d,v1=%s,", stripeAt.Unix(), hex.EncodeToString(make([]byte, 32)))+
				"v1="+stripeSignature(stripeSecret, stripeAt.Unix(), stripeBody)[len(fmt.Sprintf("t=%d,v1=", stripeAt.Unix())):]),
			stripeBody, stripeAt, sources.Inbound{ID: "evt_1NG8Du2eZvKYlo2CUI79vXWy", Type: "invoice.created"}, ""},
		{"stripe: a wrong secret", stripe,
			headers("Stripe-Signature", stripeSignature("whsec_other", stripeAt.Unix(), stripeBody)),
			stripeBody, stripeAt, sources.Inbound{}, sources.RefusedSignature},
		{"stripe: a byte changed", stripe,
			headers("Stripe-Signature", stripeSignature(stripeSecret, stripeAt.Unix(), stripeBody)),
			stripeBody[:len(stripeBody)-2] + `X"}`, stripeAt, sources.Inbound{}, sources.RefusedSignature},
		{"stripe: six minutes old", stripe,
			headers("Stripe-Signature", stripeSignature(stripeSecret, stripeAt.Unix(), stripeBody)),
			stripeBody, stripeAt.Add(6 * time.Minute), sources.Inbound{}, sources.RefusedTimestamp},
		{"stripe: more v1 signatures than a roll makes", stripe,
			headers("Stripe-Signature", fmt.Sprintf("t=%d", stripeAt.Unix())+strings.Repeat(",v1="+hex.EncodeToString(make([]byte, 32)), 9)),
			stripeBody, stripeAt, sources.Inbound{}, sources.RefusedMissingHeader},
		{"stripe: no time", stripe, headers("Stripe-Signature", "v1=00"), stripeBody, stripeAt, sources.Inbound{}, sources.RefusedMissingHeader},

		{"hmac: base64, with an id header", shop,
			headers("X-Shopify-Hmac-Sha256", shopify("shpss_1", `{"id":1}`), "X-Shopify-Webhook-Id", "b54557e4"),
			`{"id":1}`, swAt, sources.Inbound{ID: "b54557e4"}, ""},
		{"hmac: its id header missing", shop,
			headers("X-Shopify-Hmac-Sha256", shopify("shpss_1", `{"id":1}`)), `{"id":1}`, swAt, sources.Inbound{}, sources.RefusedMissingHeader},
		{"hmac: a wrong secret", shop,
			headers("X-Shopify-Hmac-Sha256", shopify("shpss_2", `{"id":1}`), "X-Shopify-Webhook-Id", "b1"), `{"id":1}`, swAt,
			sources.Inbound{}, sources.RefusedSignature},
		{"hmac: sha1 in hex with a prefix", legacy, headers("X-Signature", sha1Hex("s3", "a=1")), "a=1", swAt, sources.Inbound{}, ""},
		{"hmac: a byte changed", legacy, headers("X-Signature", sha1Hex("s3", "a=1")), "a=2", swAt, sources.Inbound{}, sources.RefusedSignature},
		{"hmac: without its prefix", legacy, headers("X-Signature", sha1Hex("s3", "a=1")[len("sha1="):]), "a=1", swAt,
			sources.Inbound{}, sources.RefusedSignature},
	} {
		if tc.h == nil {
			// The specification's scheme signed anew with a typed body.
			tc.body = `{"type":"invoice.paid","data":{}}`
			tc.h = headers("webhook-id", "msg_1", "webhook-timestamp", fmt.Sprint(swTimestamp),
				"webhook-signature", signStandard(t, swSecret, "msg_1", swTimestamp, tc.body))
			tc.want = sources.Inbound{ID: "msg_1", Type: "invoice.paid"}
		}
		got, err := webhook(t, tc.config).Check(tc.h, []byte(tc.body), tc.now)
		var refused *sources.Unverified
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		case tc.reason != "" && (!errors.As(err, &refused) || refused.Reason != tc.reason || !errors.Is(err, sources.ErrUnverified)):
			t.Errorf("%s: %v, want refused for %s", tc.name, err, tc.reason)
		}
	}
}

// signStandard signs as the Standard Webhooks specification says, apart
// from the code under test: v1, and the base64 of the HMAC-SHA256 of
// "{id}.{timestamp}.{body}" under the secret's bytes.
func signStandard(t *testing.T, secret, id string, at int64, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.%s", id, at, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestSignStandardMatchesTheVector holds the test's own signer to the
// specification's vector.
func TestSignStandardMatchesTheVector(t *testing.T) {
	t.Parallel()
	if got := signStandard(t, swSecret, swID, swTimestamp, swBody); got != swSignature {
		t.Errorf("%s, want %s", got, swSignature)
	}
}

// TestWebhookConfig: the defaults written in, one secret kept as a list
// of one, and every wrong field named.
func TestWebhookConfig(t *testing.T) {
	t.Parallel()
	s, err := sources.Prepare(lifecycle.Source{Name: "hooks", Kind: sources.KindWebhook,
		Config: json.RawMessage(`{"verify": {"scheme": "github", "secret": "x"}}`)})
	want := `{"verify":{"scheme":"github","secrets":["x"]},"from":"hooks","to":"*","tolerance":"5m0s"}`
	if err != nil || string(s.Config) != want {
		t.Errorf("%s %v, want %s", s.Config, err, want)
	}
	s, err = sources.Prepare(lifecycle.Source{Name: "hooks", Kind: sources.KindWebhook,
		Config: json.RawMessage(`{"verify": {"scheme": "hmac", "header": "X-Sig", "secrets": ["a", "b"]}, "from": "shop", "to": "erp", "tolerance": "1m"}`)})
	want = `{"verify":{"scheme":"hmac","secrets":["a","b"],"header":"X-Sig","algorithm":"sha256","encoding":"hex"},"from":"shop","to":"erp","tolerance":"1m0s"}`
	if err != nil || string(s.Config) != want {
		t.Errorf("%s %v, want %s", s.Config, err, want)
	}
	for _, tc := range []struct {
		config string
		want   []string
	}{
		{`{}`, []string{"config.verify.scheme", "config.verify.secrets"}},
		{`{"verify": {"scheme": "svix", "secret": "x"}, "tolerance": "2h"}`, []string{"config.tolerance", "config.verify.scheme"}},
		{`{"verify": {"scheme": "github", "secret": "x", "secrets": ["y"]}}`, []string{"config.verify.secret"}},
		{`{"verify": {"scheme": "github", "secret": "x", "secert": "y"}}`, []string{"config.verify"}},
		{`{"verify": {"scheme": "standard-webhooks", "secrets": ["whsec_c2hvcnQ=", "` + swSecret + `"]}}`, []string{"config.verify.secrets[0]"}},
		{`{"verify": {"scheme": "github", "secrets": ["1","2","3","4","5","6","7","8","9","10","11"]}}`, []string{"config.verify.secrets"}},
		{`{"verify": {"scheme": "github", "secret": "x", "header": "X-Sig"}}`, []string{"config.verify.header"}},
		{`{"verify": {"scheme": "hmac", "secret": "x", "algorithm": "md5", "encoding": "base32", "id_header": "X Id", "prefix": "a b"}}`,
			[]string{"config.verify.algorithm", "config.verify.encoding", "config.verify.header", "config.verify.id_header", "config.verify.prefix"}},
		{`{"verify": {"scheme": "github", "secret": "x"}, "from": "", "to": "a\u0001"}`, []string{"config.to"}},
		{`{"verify": {"scheme": "github", "secret": "x"}, "type": "a b",
			"headers": ["X-Tenant", "content-type", "Authorization", "x-*-y", "webhook-*", "x request", "x-request-*", "*"]}`,
			[]string{"config.headers[1]", "config.headers[2]", "config.headers[3]", "config.headers[4]", "config.headers[5]", "config.type"}},
	} {
		_, err := sources.Prepare(lifecycle.Source{Name: "hooks", Kind: sources.KindWebhook, Config: json.RawMessage(tc.config)})
		if got := fields(err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: fields %v, want %v (%v)", tc.config, got, tc.want, err)
		}
	}
}

// TestWebhookKeysAreReserved: a webhook's key prefix is refused to
// senders, beside the polling sources'.
func TestWebhookKeysAreReserved(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{"webhook:msg_1": true, "row:1": true, "file:ab": true, "order-1": false, "hook:1": false} {
		if got := sources.ReservedKey(key); got != want {
			t.Errorf("ReservedKey(%q) = %v", key, got)
		}
	}
	if sources.Polled(sources.KindWebhook) || !sources.Polled(sources.KindDirectory) || !sources.Polled(sources.KindInboxTable) {
		t.Error("Polled")
	}
}

// TestWebhookKeepsTheHeadersItNames: a verified request's headers that the
// source's patterns take become the message's, lower case, several values
// joined; reserved headers and credentials never do, even under *. The
// source's type stands in where the scheme names none.
func TestWebhookKeepsTheHeadersItNames(t *testing.T) {
	t.Parallel()
	const body = `{"order": 1}`
	sign := func(secret string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(body))
		return hex.EncodeToString(m.Sum(nil))
	}
	request := headers("X-Sig", sign("s"), "X-Tenant", "acme", "X-Request-Id", "r1", "X-Request-Hop", "a", "X-Request-Hop", "b",
		"X-Other", "o", "Authorization", "Bearer t", "Cookie", "c=1", "Content-Type", "application/json", "Webhook-Id", "w1",
		"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	for _, tc := range []struct {
		config string
		want   sources.Inbound
	}{
		{`{"verify": {"scheme": "hmac", "header": "X-Sig", "secret": "s"}}`, sources.Inbound{}},
		{`{"verify": {"scheme": "hmac", "header": "X-Sig", "secret": "s"}, "headers": ["X-Tenant", "x-request-*"], "type": "shop.order"}`,
			sources.Inbound{Type: "shop.order", Headers: map[string]string{"x-tenant": "acme", "x-request-id": "r1", "x-request-hop": "a, b"}}},
		{`{"verify": {"scheme": "hmac", "header": "X-Sig", "secret": "s"}, "headers": ["*"]}`,
			sources.Inbound{Headers: map[string]string{"x-sig": sign("s"), "x-tenant": "acme", "x-request-id": "r1", "x-request-hop": "a, b", "x-other": "o"}}},
	} {
		got, err := webhook(t, tc.config).Check(request, []byte(body), time.Now())
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.config, got, err, tc.want)
		}
	}
}
