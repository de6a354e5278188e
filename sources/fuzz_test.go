package sources_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// FuzzWebhookCheck reads a webhook request's headers by each scheme
// (Check): a refusal is an *Unverified with one of the reasons; a request
// accepted has a delivery id that fits an idempotency key and a type that
// is a message type, and with one byte added to its body it is refused
// for its signature.
func FuzzWebhookCheck(f *testing.F) {
	configs := []string{
		`{"verify": {"scheme": "standard-webhooks", "secret": "` + swSecret + `"}}`,
		`{"verify": {"scheme": "github", "secret": "` + ghSecret + `"}}`,
		`{"verify": {"scheme": "stripe", "secret": "` + stripeSecret + `"}}`,
		`{"verify": {"scheme": "hmac", "header": "X-Signature", "algorithm": "sha1", "prefix": "sha1=", "secret": "s3", "id_header": "X-Id"}}`,
		`{"verify": {"scheme": "hmac", "header": "X-Signature", "encoding": "base64", "algorithm": "sha512", "secret": "s3"}}`,
	}
	var cfgs []sources.WebhookConfig
	for _, c := range configs {
		cfgs = append(cfgs, webhook(f, c))
	}
	now := time.Unix(swTimestamp, 0)
	stripeBody := `{"id":"evt_1","type":"invoice.created"}`
	f.Add(uint8(0), swSignature, fmt.Sprint(swTimestamp), swID, "", swBody)
	f.Add(uint8(0), "v1a,AAAA  "+swSignature+" v2,x", fmt.Sprint(swTimestamp), swID, "", swBody)
	f.Add(uint8(0), swSignature, "+1614265330", swID, "", swBody)
	f.Add(uint8(1), ghSignature, "", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "pull_request", ghBody)
	f.Add(uint8(1), "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17", "", "d", "x y", ghBody)
	f.Add(uint8(2), stripeSignature(stripeSecret, swTimestamp, stripeBody)+",v0=00", "", "", "", stripeBody)
	f.Add(uint8(2), "t=1614265330,t=1614265331,v1=zz", "", "", "", stripeBody)
	f.Add(uint8(3), "sha1=5b3e1bfbbc35a0f2cbfbfd3ab7b4b6cf3c2cd1aa", "", "id-1", "", "a=1")
	f.Add(uint8(4), "AAAA====", "", "", "", "")
	f.Fuzz(func(t *testing.T, which uint8, sig, ts, id, event, body string) {
		i := int(which) % len(cfgs)
		c := cfgs[i]
		h := http.Header{}
		switch c.Verify.Scheme {
		case sources.SchemeStandardWebhooks:
			h.Set("Webhook-Id", id)
			h.Set("Webhook-Timestamp", ts)
			h.Set("Webhook-Signature", sig)
		case sources.SchemeGitHub:
			h.Set("X-Hub-Signature-256", sig)
			h.Set("X-GitHub-Delivery", id)
			h.Set("X-GitHub-Event", event)
		case sources.SchemeStripe:
			h.Set("Stripe-Signature", sig)
		default:
			h.Set(c.Verify.Header, sig)
			if c.Verify.IDHeader != "" {
				h.Set(c.Verify.IDHeader, id)
			}
		}
		in, err := c.Check(h, []byte(body), now)
		var refused *sources.Unverified
		if err != nil {
			if !errors.As(err, &refused) || !slices.Contains(sources.RefusedReasons, refused.Reason) {
				t.Fatalf("%s: refused with %v", configs[i], err)
			}
			return
		}
		if key := sources.WebhookKeyPrefix + in.ID; len(key) > lifecycle.MaxPartyLength ||
			strings.ContainsFunc(in.ID, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
			t.Fatalf("%s: the id %q makes no key", configs[i], in.ID)
		}
		if err := lifecycle.CheckMessageType("type", in.Type); err != nil {
			t.Fatalf("%s: the type %q: %v", configs[i], in.Type, err)
		}
		changed := append(bytes.Clone([]byte(body)), 'x')
		if _, err := c.Check(h, changed, now); !errors.As(err, &refused) || refused.Reason != sources.RefusedSignature {
			t.Fatalf("%s: a body with a byte more: %v", configs[i], err)
		}
	})
}
