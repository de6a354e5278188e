package targets

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// The specification's own example, from the test of its Go library.
func TestSignStandardWebhooksVector(t *testing.T) {
	k, err := ParseKey(SchemeHMAC, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign([]Key{k}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

func TestSignEd25519RoundTrip(t *testing.T) {
	k, err := NewKey(SchemeEd25519, "", clockTime)
	if err != nil {
		t.Fatal(err)
	}
	// The secret's text form gives the same pair back.
	again, err := ParseKey(SchemeEd25519, k.SecretText())
	if err != nil || !bytes.Equal(again.Public, k.Public) {
		t.Fatalf("parse %s: %v, public %x, want %x", k.SecretText(), err, again.Public, k.Public)
	}
	public, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(k.PublicText(), "whpk_"))
	if err != nil || !strings.HasPrefix(k.PublicText(), "whpk_") {
		t.Fatalf("public key %q: %v", k.PublicText(), err)
	}
	body := []byte(`{"a":1}`)
	header := Sign([]Key{k}, "d1", clockTime, body)
	sig, ok := strings.CutPrefix(header, "v1a,")
	if !ok {
		t.Fatalf("signature %q is not v1a", header)
	}
	raw, _ := base64.StdEncoding.DecodeString(sig)
	content := "d1." + strconv.FormatInt(clockTime.Unix(), 10) + "."
	if !ed25519.Verify(public, []byte(content+string(body)), raw) {
		t.Fatal("the signature does not verify with the public key")
	}
	if ed25519.Verify(public, []byte(content+`{"a":2}`), raw) {
		t.Fatal("the signature verifies another body")
	}
}

func TestNewKey(t *testing.T) {
	k, err := NewKey(SchemeHMAC, "", clockTime)
	if err != nil || len(k.Secret) != 32 || !strings.HasPrefix(k.SecretText(), "whsec_") || k.PublicText() != "" {
		t.Fatalf("hmac key %+v: %v", k, err)
	}
	if other, _ := NewKey(SchemeHMAC, "", clockTime); other.ID == k.ID || bytes.Equal(other.Secret, k.Secret) {
		t.Fatal("two new keys are the same")
	}
	given := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 24))
	if k, err := NewKey(SchemeHMAC, given, clockTime); err != nil || k.SecretText() != given {
		t.Fatalf("given key: %s, %v", k.SecretText(), err)
	}
	if !strings.HasPrefix(k.Fingerprint(), "sha256:") || len(k.Fingerprint()) != len("sha256:")+32 {
		t.Fatalf("fingerprint %q", k.Fingerprint())
	}
}

func TestPrepareSigning(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, n)) }
	for _, tc := range []struct {
		name    string
		kind    string
		signing *lifecycle.Signing
		scheme  string // the scheme prepared, when valid
		field   string // the field refused, when not
	}{
		{"http signs by default", "http", nil, SchemeHMAC, ""},
		{"ed25519", "http", &lifecycle.Signing{Scheme: SchemeEd25519}, SchemeEd25519, ""},
		{"none", "http", &lifecycle.Signing{Scheme: SchemeNone}, SchemeNone, ""},
		{"hmac key given", "http", &lifecycle.Signing{Key: "whsec_" + b64(64)}, SchemeHMAC, ""},
		{"ed25519 key given", "http", &lifecycle.Signing{Scheme: SchemeEd25519, Key: "whsk_" + b64(32)}, SchemeEd25519, ""},
		{"unknown scheme", "http", &lifecycle.Signing{Scheme: "rsa"}, "", "signing.scheme"},
		{"hmac key too short", "http", &lifecycle.Signing{Key: "whsec_" + b64(23)}, "", "signing.key"},
		{"hmac key too long", "http", &lifecycle.Signing{Key: "whsec_" + b64(65)}, "", "signing.key"},
		{"hmac key without prefix", "http", &lifecycle.Signing{Key: b64(32)}, "", "signing.key"},
		{"hmac key not base64", "http", &lifecycle.Signing{Key: "whsec_!!!"}, "", "signing.key"},
		{"ed25519 key of hmac", "http", &lifecycle.Signing{Scheme: SchemeEd25519, Key: "whsec_" + b64(32)}, "", "signing.key"},
		{"ed25519 seed too short", "http", &lifecycle.Signing{Scheme: SchemeEd25519, Key: "whsk_" + b64(31)}, "", "signing.key"},
		{"key of none", "http", &lifecycle.Signing{Scheme: SchemeNone, Key: "whsec_" + b64(32)}, "", "signing.key"},
		{"file signs nothing", "file", &lifecycle.Signing{Scheme: SchemeHMAC}, "", "signing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := `{"url":"https://example.test/"}`
			if tc.kind == "file" {
				config = `{"dir":"/tmp/out"}`
			}
			in := target(tc.kind, config)
			in.Signing = tc.signing
			got, err := Prepare(in)
			if tc.field != "" {
				if names := fieldNames(t, err); !slices.Equal(names, []string{tc.field}) {
					t.Fatalf("refused %v (%v), want %s", names, err, tc.field)
				}
				return
			}
			if err != nil || got.Signing == nil || got.Signing.Scheme != tc.scheme {
				t.Fatalf("prepared %+v: %v, want scheme %s", got.Signing, err, tc.scheme)
			}
		})
	}
}

// captured is the one request a receiver took.
type captured struct {
	header http.Header
	body   []byte
}

func receiver(t *testing.T) (*httptest.Server, chan captured) {
	got := make(chan captured, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- captured{r.Header.Clone(), body}
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestSignedDeliveryVerifies(t *testing.T) {
	srv, got := receiver(t)
	k, err := NewKey(SchemeHMAC, "", clockTime)
	if err != nil {
		t.Fatal(err)
	}
	prepared, err := Prepare(target("http", `{"url":"`+srv.URL+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(prepared, []Key{k}, clock)
	if err != nil {
		t.Fatal(err)
	}
	a := Attempt{MessageID: uuid.New(), DeliveryID: uuid.New(), Seq: 1, Number: 1, Payload: []byte(`{"order":42}`)}
	if o := d.Deliver(context.Background(), a); o.Kind != lifecycle.OutcomeDelivered {
		t.Fatalf("outcome %+v", o)
	}
	req := <-got
	if req.header.Get("webhook-id") != a.DeliveryID.String() || req.header.Get("webhook-timestamp") != strconv.FormatInt(clockTime.Unix(), 10) {
		t.Fatalf("headers %v", req.header)
	}
	if err := Verify(req.header, req.body, k, clockTime); err != nil {
		t.Fatalf("the delivery does not verify: %v", err)
	}
	changed := bytes.Clone(req.body)
	changed[len(changed)-2]++
	if err := Verify(req.header, changed, k, clockTime); err == nil {
		t.Fatal("a body changed by one byte verifies")
	}
	if err := Verify(req.header, req.body, k, clockTime.Add(6*time.Minute)); err == nil {
		t.Fatal("a timestamp 6 minutes old verifies")
	}
	// Every attempt carries the same webhook-id; a second key signs beside
	// the first.
	second, _ := NewKey(SchemeHMAC, "", clockTime)
	if d, err = New(prepared, []Key{k, second}, clock); err != nil {
		t.Fatal(err)
	}
	a.Number = 2
	d.Deliver(context.Background(), a)
	req = <-got
	if req.header.Get("webhook-id") != a.DeliveryID.String() || len(strings.Fields(req.header.Get("webhook-signature"))) != 2 {
		t.Fatalf("second attempt's headers %v", req.header)
	}
	if Verify(req.header, req.body, k, clockTime) != nil || Verify(req.header, req.body, second, clockTime) != nil {
		t.Fatal("the second attempt does not verify with both keys")
	}
}

func TestUnsignedDeliveryHasNoSignature(t *testing.T) {
	srv, got := receiver(t)
	in := target("http", `{"url":"`+srv.URL+`"}`)
	in.Signing = &lifecycle.Signing{Scheme: SchemeNone}
	prepared, err := Prepare(in)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(prepared, nil, clock)
	if err != nil {
		t.Fatal(err)
	}
	d.Deliver(context.Background(), Attempt{MessageID: uuid.New(), DeliveryID: uuid.New(), Seq: 1, Number: 1, Payload: []byte("x")})
	if req := <-got; req.header.Get("webhook-signature") != "" {
		t.Fatalf("an unsigned target sent webhook-signature %q", req.header.Get("webhook-signature"))
	}
}

func TestWebhookHeadersAreReserved(t *testing.T) {
	for _, name := range []string{"webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE"} {
		_, err := Prepare(target("http", `{"url":"https://example.test/","headers":{"`+name+`":"x"}}`))
		if names := fieldNames(t, err); !slices.Equal(names, []string{"config.headers"}) {
			t.Fatalf("header %s: refused %v", name, names)
		}
	}
}

// TestVerify: Verify takes what SignHeaders signs, with either scheme, and
// refuses another key, a changed body, a timestamp six minutes off and a
// key whose end has come.
func TestVerify(t *testing.T) {
	body := []byte(`{"order":42}`)
	for _, scheme := range []string{SchemeHMAC, SchemeEd25519} {
		k, err := NewKey(scheme, "", clockTime)
		if err != nil {
			t.Fatal(err)
		}
		other, _ := NewKey(scheme, "", clockTime)
		h := http.Header{}
		SignHeaders(h, []Key{k}, "msg_1", clockTime, body)
		if err := Verify(h, body, k, clockTime); err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		for name, err := range map[string]error{
			"another key":          Verify(h, body, other, clockTime),
			"a changed body":       Verify(h, []byte(`{"order":43}`), k, clockTime),
			"six minutes later":    Verify(h, body, k, clockTime.Add(6*time.Minute)),
			"six minutes before":   Verify(h, body, k, clockTime.Add(-6*time.Minute)),
			"no signature headers": Verify(http.Header{}, body, k, clockTime),
		} {
			if err == nil {
				t.Errorf("%s: %s verifies", scheme, name)
			}
		}
		k.ExpiresAt = clockTime
		h = http.Header{}
		SignHeaders(h, []Key{k, other}, "msg_1", clockTime, body)
		if Verify(h, body, k, clockTime) == nil || Verify(h, body, other, clockTime) != nil {
			t.Errorf("%s: a key at its end still signs: %v", scheme, h)
		}
	}
	if !slices.Equal(lifecycle.SigningSchemes, []string{SchemeHMAC, SchemeEd25519, SchemeNone}) {
		t.Errorf("the schemes %v", lifecycle.SigningSchemes)
	}
}
