package targets

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/waybill/waybill/lifecycle"
)

// The official library agrees with Sign on the specification's example.
func TestOfficialLibrarySignsAsWeDo(t *testing.T) {
	const secret, id, body = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", `{"test": 2432232314}`
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wh.Sign(id, time.Unix(1614265330, 0), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseKey(SchemeHMAC, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := Sign([]Key{k}, id, time.Unix(1614265330, 0), []byte(body)); got != want {
		t.Fatalf("Sign gives %s, the library %s", got, want)
	}
}

// A receiver that verifies with the official library accepts what a
// target sends, with each of two keys during a rotation's grace, and
// refuses a body changed by one byte and a timestamp six minutes old. The
// library judges the timestamp by the wall clock, so the deliverer's clock
// here is the wall clock too.
func TestOfficialLibraryVerifiesDeliveries(t *testing.T) {
	srv, got := receiver(t)
	prepared, err := Prepare(target("http", `{"url":"`+srv.URL+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := NewKey(SchemeHMAC, "", time.Now())
	current, _ := NewKey(SchemeHMAC, "", time.Now())
	send := func(keys []Key, clock func() time.Time) captured {
		t.Helper()
		d, err := New(prepared, keys, clock)
		if err != nil {
			t.Fatal(err)
		}
		a := Attempt{MessageID: uuid.New(), DeliveryID: uuid.New(), Seq: 1, Number: 1, Payload: []byte(`{"order":42}`)}
		if o := d.Deliver(context.Background(), a); o.Kind != lifecycle.OutcomeDelivered {
			t.Fatalf("outcome %+v", o)
		}
		return <-got
	}
	verifier := func(k Key) *standardwebhooks.Webhook {
		wh, err := standardwebhooks.NewWebhook(k.SecretText())
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}

	req := send([]Key{old, current}, time.Now)
	if n := len(strings.Fields(req.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures during a grace, want 2", n)
	}
	for _, k := range []Key{old, current} {
		if err := verifier(k).Verify(req.body, req.header); err != nil {
			t.Fatalf("key %s does not verify: %v", k.ID, err)
		}
	}
	changed := bytes.Clone(req.body)
	changed[len(changed)-2]++
	if err := verifier(current).Verify(changed, req.header); err == nil {
		t.Fatal("a body changed by one byte verifies")
	}

	req = send([]Key{current}, time.Now)
	if err := verifier(old).Verify(req.body, req.header); err == nil {
		t.Fatal("a key past its grace still verifies")
	}
	if err := verifier(current).Verify(req.body, req.header); err != nil {
		t.Fatalf("after the grace: %v", err)
	}

	req = send([]Key{current}, func() time.Time { return time.Now().Add(-6 * time.Minute) })
	if err := verifier(current).Verify(req.body, req.header); err == nil {
		t.Fatal("a timestamp six minutes old verifies")
	}
}

// BenchmarkSign is the CPU a signature adds to an attempt, with a body of
// a typical size (performance.md, *Signing*).
func BenchmarkSign(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 512)
	for _, scheme := range []string{SchemeHMAC, SchemeEd25519} {
		b.Run(scheme, func(b *testing.B) {
			k, err := NewKey(scheme, "", time.Unix(0, 0))
			if err != nil {
				b.Fatal(err)
			}
			id := uuid.NewString()
			for b.Loop() {
				Sign([]Key{k}, id, time.Unix(1614265330, 0), body)
			}
		})
	}
}
