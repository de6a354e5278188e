package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// fastSamples are payloads of every kind with a fast decoder, bare and
// with every field set.
func fastSamples() []Payload {
	at := time.Date(2026, 5, 1, 12, 30, 15, 123456000, time.UTC)
	zoned := time.Date(2026, 5, 1, 12, 30, 15, 0, time.FixedZone("", 2*3600))
	tok := uuid.MustParse("0194a2b1-0000-7000-8000-000000000001")
	nds := NewDeliveries{Deliveries: []NewDelivery{{ID: tok, Seq: 1, Target: "alpha"}, {ID: uuid.New(), Seq: 2, Target: "beta"}}, NextDue: at}
	return []Payload{
		&MessageAccepted{Source: "erp", From: "acme", To: "globex", ContentType: "text/plain", PayloadSize: 5, PayloadSHA256: strings.Repeat("ab", 32)},
		&MessageAccepted{Source: "erp", From: "Ünïcødé ✓", To: "b c", ContentType: "application/json; charset=utf-8",
			PayloadSize: 1 << 40, PayloadSHA256: strings.Repeat("0f", 32), IdempotencyKey: "key-1"},
		&MessageDispatched{},
		&MessageDispatched{NewDeliveries: NewDeliveries{Deliveries: []NewDelivery{}}},
		&MessageDispatched{NewDeliveries: nds},
		&MessageRedispatched{NewDeliveries: nds},
		&MessageRefused{Refusal: lifecycle.RefusalRejected, Reason: "no route"},
		&DeliveryWoken{DispatchCount: 3, NextDue: zoned},
		&DeliveryClaimed{Token: tok, Attempt: 1, LeaseEnd: at},
		&DeliveryAttempted{Token: tok, Attempt: 2, Outcome: lifecycle.Delivered("200 OK")},
		&DeliveryAttempted{Token: tok, Attempt: 2, Outcome: lifecycle.Retry(at, "503")},
		&DeliveryAttempted{Token: tok, Attempt: 2, Outcome: lifecycle.AwaitingAck("sent", zoned)},
		&DeliveryAttempted{Token: tok, Attempt: 9, Outcome: lifecycle.Failed("400")},
		&DeliveryReleased{Token: tok, Started: true, Reason: "stopping"},
		&DeliveryReleased{Token: tok, Reason: "stopping"},
		&DeliveryLeaseExpired{Token: tok, LeaseEnd: at},
		&DeliveryStalled{WakeUps: 10, Reason: "not claimed"},
		&DeliveryAttempted{Token: tok, Attempt: 3, Outcome: lifecycle.Outcome{Kind: lifecycle.OutcomeAwaitingAck,
			Text: "202", Deadline: at, ExternalID: "SM-4711"}},
		&ReceiptReceived{Positive: true},
		&ReceiptReceived{Receipt: Receipt{Detail: "bad"}},
		&ReceiptReceived{Receipt: Receipt{Detail: "d", ExternalID: "SM-1", Status: "UNDELIV", Code: "013"}},
		&ReceiptRefused{Positive: true, Receipt: Receipt{Detail: "d"}, Reason: "not awaited"},
		&ReceiptRefused{Positive: true, Receipt: Receipt{ExternalID: "x", Status: "DELIVRD", Code: "000"}, Reason: "late"},
		&ReceiptRefused{Receipt: Receipt{ExternalID: "SM-1", Status: "UNDELIV"}, Reason: "handed over again", SupersededBy: 12},
		&ReceiptIntermediate{Receipt: Receipt{ExternalID: "SM-1"}},
		&ReceiptIntermediate{Receipt: Receipt{Detail: "on its way", ExternalID: "SM-1", Status: "ENROUTE", Code: "0"}},
		&ReceiptTimedOut{Deadline: at, Reason: "overdue"},
		&DeliveryRedelivered{DispatchCount: 1, NextDue: at},
		&DeliveryRedelivered{DispatchCount: 1, NextDue: at, Lane: Lane{LaneSeq: 7, Blocked: true}},
		&MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", PayloadSize: 1,
			PayloadSHA256: strings.Repeat("ab", 32), OrderingKey: "patient 42"},
		&MessageDispatched{NewDeliveries: NewDeliveries{Deliveries: []NewDelivery{
			{ID: tok, Seq: 1, Target: "alpha", Lane: Lane{LaneSeq: 1 << 40}},
			{ID: uuid.New(), Seq: 2, Target: "beta", Lane: Lane{LaneSeq: 3, Blocked: true, Continue: true}}}, NextDue: at}},
		&DeliveryUnblocked{DispatchCount: 1, NextDue: at, After: tok},
		&DeliveryUnblocked{DispatchCount: 1, NextDue: at},
		&DeliveryDue{DispatchCount: 1, NextDue: at},
		&DeliveryDue{DispatchCount: 1, NextDue: at, Early: true},
		&MessageDispatched{NewDeliveries: NewDeliveries{Deliveries: []NewDelivery{{ID: tok, Seq: 1, Target: "alpha"}},
			NextDue: zoned, Scheduled: true}},
		&MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", PayloadSize: 1,
			PayloadSHA256: strings.Repeat("ab", 32), DeliverAt: zoned},
		&DeliverySkipped{},
		&DeliverySkipped{Reason: "sent by hand"},
		&DeliveryLaneHeld{Waiting: 3, Since: at},
		&MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", PayloadSize: 1,
			PayloadSHA256: strings.Repeat("ab", 32), DuplicateKey: "MSH-10 42", PossibleDuplicateOf: tok},
		&MessageRedispatched{NewDeliveries: nds, Operation: tok},
		&MessageResent{Generation: 2, Superseded: []uuid.UUID{tok, uuid.New()}, NewDeliveries: nds, Reason: "fixed", Operation: tok},
		&MessageResent{Generation: 3, Replay: true, NewDeliveries: NewDeliveries{Deliveries: []NewDelivery{}}},
		&MessageResent{Generation: 3, Superseded: []uuid.UUID{}, NewDeliveries: nds},
		&DeliveryRedelivered{DispatchCount: 1, NextDue: at, Operation: tok},
		&DeliverySkipped{Reason: "r", Operation: tok},
		&MessageAccepted{Source: "erp", From: "a", To: "b", ContentType: "text/plain", PayloadSHA256: strings.Repeat("ab", 32),
			CallbackURL: "https://erp.example/outcome?id=1"},
		&CallbackClaimed{Seq: 1, Token: tok, Attempt: 1, LeaseEnd: at},
		&CallbackAttempted{Seq: 2, Token: tok, Attempt: 3, Outcome: lifecycle.Delivered("204 No Content")},
		&CallbackAttempted{Seq: 2, Token: tok, Attempt: 3, Outcome: lifecycle.Retry(zoned, "503")},
		&CallbackReleased{Seq: 1, Token: tok, Started: true, Reason: "stopping"},
		&CallbackReleased{Seq: 1, Token: tok, Reason: "stopping"},
		&CallbackLeaseExpired{Seq: 4, Token: tok, LeaseEnd: at},
		&MessagePayloadExpunged{PayloadSize: 512, PayloadSHA256: strings.Repeat("ab", 32), After: lifecycle.Duration(36 * time.Hour)},
		&MessagePayloadExpunged{PayloadSHA256: strings.Repeat("0F", 32), After: lifecycle.Duration(time.Second + time.Millisecond)},
	}
}

// jsonbStyle writes data as PostgreSQL writes jsonb: keys ordered by
// length, then bytes, with a space after every colon and comma.
func jsonbStyle(t testing.TB, data []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var write func(v any)
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, func(a, b string) int {
				if len(a) != len(b) {
					return len(a) - len(b)
				}
				return strings.Compare(a, b)
			})
			out.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					out.WriteString(", ")
				}
				write(k)
				out.WriteString(": ")
				write(v[k])
			}
			out.WriteByte('}')
		case []any:
			out.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					out.WriteString(", ")
				}
				write(e)
			}
			out.WriteByte(']')
		default:
			b, _ := json.Marshal(v)
			out.Write(b)
		}
	}
	write(v)
	return out.Bytes()
}

// agree checks data with both decoders: when the fast one accepts it,
// encoding/json must read the same value; and Decode must give what
// encoding/json alone gives. It reports whether the fast one accepted.
func agree(t testing.TB, kind Kind, data []byte) bool {
	t.Helper()
	p := catalogue[kind]()
	fast, ok := p.(fastPayload)
	if !ok {
		t.Fatalf("%s has no fast decoder", kind)
	}
	accepted := decodeFast(fast, data)
	slow := catalogue[kind]()
	slowErr := decodeJSON(slow, data)
	if accepted {
		if slowErr != nil {
			t.Fatalf("%s %q: the fast decoder accepts what encoding/json refuses: %v", kind, data, slowErr)
		}
		if !reflect.DeepEqual(p, slow) {
			t.Fatalf("%s %q: the fast decoder reads %#v, encoding/json %#v", kind, data, p, slow)
		}
	}
	got, err := Decode(kind, data)
	if slowErr == nil {
		slowErr = slow.Validate()
	}
	var want Payload
	if slowErr == nil {
		want = slow
	}
	if fmt.Sprint(err) != fmt.Sprint(wrap(kind, slowErr)) || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s %q: Decode gives %#v, %v; encoding/json %#v, %v", kind, data, got, err, want, slowErr)
	}
	return accepted
}

func wrap(kind Kind, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("decode %s: %w", kind, err)
}

// mutations are changes to a payload's JSON that the fast decoder must
// either read as encoding/json does or give up on.
func mutations(data []byte) [][]byte {
	s := string(data)
	var out []string
	out = append(out, s, " "+s+" \n", s+" x", s+"}", s+" {}", "{}", "", "null", "[]", `{"a":1}`,
		strings.Replace(s, "{", "{\n\t", 1), strings.ReplaceAll(s, ",", " ,\r\n"), strings.ReplaceAll(s, ":", " : "),
		strings.Replace(s, "}", `,}`, 1), strings.Replace(s, "{", `{,`, 1), strings.Replace(s, "}", `,"extra":1}`, 1))
	// Every key in upper case, repeated, and every value null, a string,
	// a number of other forms.
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		j := strings.IndexByte(s[i+1:], '"') + i + 1
		if j <= i || j+1 >= len(s) || s[j+1] != ':' {
			continue
		}
		key := s[i : j+1]
		end := len(s) - 1
		if k := strings.IndexAny(s[j+2:], ",}"); k >= 0 {
			end = j + 2 + k
		}
		value := s[j+2 : end]
		out = append(out,
			s[:i]+strings.ToUpper(key)+s[j+1:],
			s[:i]+key+":"+value+","+s[i:],
			s[:j+2]+"null"+s[end:],
			s[:j+2]+`"5"`+s[end:],
			s[:j+2]+"1.0"+s[end:],
			s[:j+2]+"1e2"+s[end:],
			s[:j+2]+"-0"+s[end:],
			s[:j+2]+"007"+s[end:],
			s[:j+2]+"123456789012345678"+s[end:],
			s[:j+2]+"9223372036854775808"+s[end:],
			s[:j+2]+"true"+s[end:],
			s[:j+2]+"truex"+s[end:],
			s[:j+2]+`"a\"b"`+s[end:],
			s[:j+2]+`"\u00e9"`+s[end:],
			s[:j+2]+"\"a\xffb\""+s[end:],
			s[:j+2]+"\"a\tb\""+s[end:],
			s[:j+2]+`[]`+s[end:],
			s[:j+2]+`{}`+s[end:],
		)
		if strings.HasPrefix(value, `"`) {
			// The value's string cut short, or grown with a space.
			out = append(out, s[:j+2]+value[:len(value)/2]+`"`+s[end:], s[:j+2]+`" `+value[1:]+s[end:])
		}
	}
	res := make([][]byte, len(out))
	for i, o := range out {
		res[i] = []byte(o)
	}
	return res
}

// TestDecodeFastAgreesWithEncodingJSON reads every sample as Encode writes
// it and as PostgreSQL gives it back, which the fast decoder must accept,
// and many changed forms of it, which it must read as encoding/json does or
// leave to it.
func TestDecodeFastAgreesWithEncodingJSON(t *testing.T) {
	kinds := map[Kind]bool{}
	for _, p := range fastSamples() {
		kinds[p.Kind()] = true
		data, err := Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, form := range [][]byte{data, jsonbStyle(t, data)} {
			if !agree(t, p.Kind(), form) {
				t.Errorf("%s %s: the fast decoder gives up", p.Kind(), form)
			}
			for _, m := range mutations(form) {
				agree(t, p.Kind(), m)
			}
		}
	}
	for _, k := range Kinds() {
		_, fast := catalogue[k]().(fastPayload)
		if fast != fastKind(k) || fast != kinds[k] {
			t.Errorf("%s: fast decoder %v, samples %v", k, fast, kinds[k])
		}
	}
}

func FuzzDecodeFast(f *testing.F) {
	var kinds []Kind
	for _, p := range fastSamples() {
		data, _ := Encode(p)
		if !slices.Contains(kinds, p.Kind()) {
			kinds = append(kinds, p.Kind())
		}
		k := uint8(slices.Index(kinds, p.Kind()))
		f.Add(k, data)
		f.Add(k, jsonbStyle(f, data))
	}
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		agree(t, kinds[int(k)%len(kinds)], data)
	})
}

// BenchmarkDecode decodes every fast sample as PostgreSQL gives it back,
// with Decode (the fast decoder) and with encoding/json alone; an op is
// one pass over the samples.
func BenchmarkDecode(b *testing.B) {
	type sample struct {
		kind Kind
		data []byte
	}
	var samples []sample
	for _, p := range fastSamples() {
		data, err := Encode(p)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, sample{p.Kind(), jsonbStyle(b, data)})
	}
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			for _, s := range samples {
				if _, err := Decode(s.kind, s.data); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			for _, s := range samples {
				p := catalogue[s.kind]()
				if err := decodeJSON(p, s.data); err != nil {
					b.Fatal(err)
				}
				if err := p.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
