package lifecycle

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOrderingDefaultsAndValidate(t *testing.T) {
	d := Ordering{}.WithDefaults()
	if d.Mode != OrderingNone || d.OnFailure != OnFailureBlock || d.FIFO() {
		t.Errorf("defaults %+v", d)
	}
	for _, tt := range []struct {
		name string
		o    Ordering
		want []string
	}{
		{"defaults", d, nil},
		{"fifo continue", Ordering{Mode: OrderingFIFO, OnFailure: OnFailureContinue, HeadAlertAfter: Duration(time.Minute)}, nil},
		{"bad mode", Ordering{Mode: "lifo", OnFailure: OnFailureBlock}, []string{"ordering.mode"}},
		{"bad on_failure", Ordering{Mode: OrderingFIFO, OnFailure: "skip"}, []string{"ordering.on_failure"}},
		{"alert too soon", Ordering{Mode: OrderingFIFO, OnFailure: OnFailureBlock, HeadAlertAfter: Duration(time.Millisecond)}, []string{"ordering.head_alert_after"}},
	} {
		if got := fields(tt.o.Validate()); !slices.Equal(got, tt.want) {
			t.Errorf("%s: fields %v, want %v", tt.name, got, tt.want)
		}
	}
	var target Target
	err := json.Unmarshal([]byte(`{"name":"a","kind":"http","config":{},"ordering":{"mode":"FIFO"}}`), &target)
	if err == nil || !strings.Contains(err.Error(), "allowed are none, fifo") {
		t.Errorf("a bad mode decoded: %v", err)
	}
}

func TestCheckOrderingKey(t *testing.T) {
	for _, tt := range []struct {
		key string
		ok  bool
	}{
		{"", true}, {"patient-42", true}, {strings.Repeat("k", 200), true},
		{strings.Repeat("k", 201), false}, {"tab\there", false},
		{"kö\uFFFD", true}, {"k\x00", false}, {"k\xff", false}, {"\xc3", false}, {"k\x7f", false},
	} {
		if err := CheckOrderingKey("ordering_key", tt.key); (err == nil) != tt.ok {
			t.Errorf("CheckOrderingKey(%q) = %v", tt.key, err)
		}
	}
}

func TestCheckMessageType(t *testing.T) {
	for _, tt := range []struct {
		typ string
		ok  bool
	}{
		{"", true}, {"invoice.created", true}, {"pull_request", true}, {"urn:acme/order-1.v2", true},
		{strings.Repeat("t", 255), true}, {strings.Repeat("t", 256), false},
		{"invoice created", false}, {"a\nb", false}, {"café", false}, {"a*", false},
	} {
		err := CheckMessageType("type", tt.typ)
		if (err == nil) != tt.ok {
			t.Errorf("CheckMessageType(%q) = %v", tt.typ, err)
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field != "type") {
			t.Errorf("CheckMessageType(%q): %v names no field type", tt.typ, err)
		}
	}
}
