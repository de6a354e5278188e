package journal

import (
	"errors"
	"strings"
	"testing"
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
}
