package journal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

func TestDecodeRefusesWhatIsNotInTheCatalogue(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		data string
		want string
	}{
		{"unknown kind", "message.lost", `{}`, "unknown event kind"},
		{"unknown field", KindDeliveryStalled, `{"wake_ups":5,"reason":"r","extra":1}`, "unknown field"},
		{"missing field", KindDeliveryStalled, `{"wake_ups":5}`, "reason"},
		{"bad state", KindMessageRefused, `{"refusal":"maybe","reason":"r"}`, "refusal"},
		{"not JSON", KindDeliveryWoken, `{`, "unexpected EOF"},
		{"disabled for no reason given", KindTargetDisabled, `{"target":"web","reason":"tired","message_id":"0194a2b1-0000-7000-8000-000000000001","delivery_id":"0194a2b1-0000-7000-8000-000000000002","status_code":410}`, `allowed are "gone" and "failing"`},
		{"gone without 410", KindTargetDisabled, `{"target":"web","reason":"gone","message_id":"0194a2b1-0000-7000-8000-000000000001","delivery_id":"0194a2b1-0000-7000-8000-000000000002","status_code":404}`, "status_code"},
		{"gone without its delivery", KindTargetDisabled, `{"target":"web","reason":"gone","message_id":"0194a2b1-0000-7000-8000-000000000001","status_code":410}`, "delivery_id"},
		{"a positive receipt superseded", KindReceiptRefused, `{"positive":true,"external_id":"SM-1","reason":"r","superseded_by":3}`, "superseded_by"},
		{"a receipt without an id superseded", KindReceiptRefused, `{"positive":false,"reason":"r","superseded_by":3}`, "superseded_by"},
		{"bad outcome", KindDeliveryAttempted, `{"token":"0194a2b1-0000-7000-8000-000000000001","attempt":1,"outcome":{"kind":"retry","text":"x"}}`, "retry_at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.kind, []byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode = %v, want an error about %q", err, tt.want)
			}
		})
	}
	if _, err := Decode("x", nil); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: %v", err)
	}
}

func TestEveryKindRoundTrips(t *testing.T) {
	for _, k := range Kinds() {
		p := catalogue[k]()
		if p.Kind() != k {
			t.Errorf("%s constructs a %s", k, p.Kind())
		}
		if k.Delivery() && k.Stream() != "" {
			t.Errorf("%s: a delivery kind on the config stream", k)
		}
	}
	in := &DeliveryStalled{WakeUps: 5, Reason: "not claimed"}
	data, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(KindDeliveryStalled, data)
	if err != nil || *out.(*DeliveryStalled) != *in {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if _, err := Encode(&DeliveryStalled{}); err == nil {
		t.Error("Encode accepted an invalid payload")
	}
	// The journal keeps the text as written; the fast decoder reads no
	// escapes, so none is written for HTML.
	in = &DeliveryStalled{WakeUps: 5, Reason: "<b>R&D</b>"}
	if data, err = Encode(in); err != nil || !bytes.Contains(data, []byte(`"<b>R&D</b>"`)) || !DecodesFast(KindDeliveryStalled, data) {
		t.Errorf("Encode(%+v) = %s, %v; want the reason unescaped and read by the fast decoder", in, data, err)
	}
}

// TestNewMessageKeysAreText: a message being accepted must have keys of
// text (ValidateNew), while one journaled with a control character in a
// key still decodes.
func TestNewMessageKeysAreText(t *testing.T) {
	p := &MessageAccepted{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain",
		PayloadSHA256: strings.Repeat("0", 64), IdempotencyKey: "k\x01", DuplicateKey: "d\x01"}
	var fe *lifecycle.FieldError
	if err := p.ValidateNew(); !errors.As(err, &fe) || fe.Field != "idempotency_key" || !strings.Contains(err.Error(), "duplicate_key:") {
		t.Errorf("ValidateNew = %v, want both keys refused", err)
	}
	data, err := Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(KindMessageAccepted, data); err != nil {
		t.Errorf("a journaled key with a control character: %v", err)
	}
	p.IdempotencyKey, p.DuplicateKey = strings.Repeat("k", 256), "d"
	if err := p.ValidateNew(); !errors.As(err, &fe) || fe.Field != "idempotency_key" {
		t.Errorf("a long key: %v", err)
	}
	if err := p.Validate(); !errors.As(err, &fe) || fe.Field != "idempotency_key" {
		t.Errorf("a long key: %v", err)
	}
}

// TestValidShortCutsAgree holds the checks that skip building errors to
// the ones that build them: every list of up to three deliveries drawn from
// ids, seqs and targets good and bad, with and without a next due time;
// and SHA-256 digests of every form near the valid one.
func TestValidShortCutsAgree(t *testing.T) {
	ids := []uuid.UUID{uuid.Nil, uuid.MustParse("0194a2b1-0000-7000-8000-000000000001"), uuid.MustParse("0194a2b1-0000-7000-8000-000000000002")}
	seqs := []int{-1, 0, 1, 2}
	targets := []string{"alpha", "beta", "Bad", ""}
	var all []NewDelivery
	for _, id := range ids {
		for _, seq := range seqs {
			for _, target := range targets {
				all = append(all, NewDelivery{ID: id, Seq: seq, Target: target})
			}
		}
	}
	var lists [][]NewDelivery
	lists = append(lists, nil)
	for _, a := range all {
		lists = append(lists, []NewDelivery{a})
		for _, b := range all {
			lists = append(lists, []NewDelivery{a, b})
		}
	}
	lists = append(lists, []NewDelivery{all[17], all[22], all[29]}, []NewDelivery{all[17], all[22], all[17]})
	for _, list := range lists {
		for _, due := range []time.Time{{}, time.Now()} {
			p := NewDeliveries{Deliveries: list, NextDue: due}
			if p.valid() != (p.problems() == nil) {
				t.Fatalf("%+v: valid %v, problems %v", p, p.valid(), p.problems())
			}
		}
	}
	good := strings.Repeat("0123456789abcdefABCDEF", 3)[:64]
	for _, s := range []string{good, good[:63], good + "0", "", good[:63] + "g", good[:63] + " ", " " + good[1:], good[:62] + "\xc3\xa9"} {
		b, err := hex.DecodeString(s)
		if isSHA256(s) != (err == nil && len(b) == 32) {
			t.Errorf("%q: isSHA256 %v, hex %v %d", s, isSHA256(s), err, len(b))
		}
	}
}

// TestSettingsChangedNamesTheSigningSchemes: the history of a change of
// the settings tells which scheme signs the callbacks and the alerts.
func TestSettingsChangedNamesTheSigningSchemes(t *testing.T) {
	s := lifecycle.DefaultSettings()
	s.Alerts.Signing.Scheme = "ed25519"
	got := (&SettingsChanged{Settings: s}).Text()
	if !strings.Contains(got, "signing: callbacks hmac-sha256, alerts ed25519") {
		t.Errorf("settings.changed reads %q: it does not name the signing schemes", got)
	}
}

// TestTextsCountInWords: a history's counts read "1 byte", "2 messages".
func TestTextsCountInWords(t *testing.T) {
	for _, c := range []struct {
		p    Payload
		want string
	}{
		{&MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", PayloadSize: 1}, "a to b, 1 byte of text/plain"},
		{&MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", PayloadSize: 0}, "a to b, 0 bytes of text/plain"},
		{&MessagePayloadExpunged{PayloadSize: 1, After: lifecycle.Duration(time.Hour)}, ": 1 byte, sha256"},
		{&OperationCreated{Action: lifecycle.ActionRedeliver, Matched: 1}, "redeliver of 1 message started"},
		{&OperationMatched{Messages: []uuid.UUID{uuid.New(), uuid.New()}}, "2 messages listed"},
		{&RetentionArchived{Batch: 1, File: "f", Events: 3, Records: 1, Messages: 1, Settled: 1}, "2 events of 1 message (1 settled"},
		{&RetentionPass{Expunged: 1, Removed: 2, Batches: 1, ArchiveBytes: 1}, "1 payload expunged, 2 messages removed in 1 batch, 1 byte archived"},
		{&BreakerOpened{Target: "t", Failures: 1, Requests: 1}, "1 of 1 attempt failed"},
	} {
		if got := c.p.Text(); !strings.Contains(got, c.want) {
			t.Errorf("%s reads %q, want %q in it", c.p.Kind(), got, c.want)
		}
	}
}
