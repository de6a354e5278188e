package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// The fuzz targets of the API's decoders of outside input: the bodies, the
// query parameters and the cursors. Each runs in `make test` for a few
// seconds and in `make fuzz` for long (docs/fuzzing.md).

// refusedWell fails t unless err is the API's refusal of a field: an
// ErrInvalid that names at least one field, each with its problem.
func refusedWell(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("refused with %v, not ErrInvalid", err)
	}
	fes := fieldErrors(err)
	if len(fes) == 0 {
		t.Fatalf("refused with %v, naming no field", err)
	}
	for _, fe := range fes {
		if fe.Field == "" || fe.Problem == "" {
			t.Fatalf("refused with a field error without a field or a problem: %#v", fe)
		}
	}
}

// reDecodes checks that what decodeStrict made of a body encodes to a body
// it takes again, to the same value: a value it accepts survives the
// answers and the clients that send it back.
func reDecodes(t *testing.T, v any) {
	t.Helper()
	b1, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("decoded %#v does not encode: %v", v, err)
	}
	again := reflect.New(reflect.TypeOf(v).Elem())
	if err := decodeStrict(b1, again.Interface()); err != nil {
		t.Fatalf("%s, encoded from a decoded body, is refused: %v", b1, err)
	}
	b2, err := json.Marshal(again.Interface())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("decoding again changes the body: %s then %s", b1, b2)
	}
}

// ingestSeeds are bodies of POST /messages as the docs and tests send them.
var ingestSeeds = []string{
	`{"source":"erp","from":"acme","to":"globex","payload":"hello"}`,
	`{"source":"erp","from":"acme","to":"globex","payload_base64":"AAEC/w==","content_type":"application/octet-stream"}`,
	`{"source":"erp","from":"acme","to":"globex","payload":"<order id=\"4\"/>","content_type":"application/xml",
	  "idempotency_key":"order-4","ordering_key":"customer-7","duplicate_key":"ctrl-1","callback_url":"https://erp.example.com/cb"}`,
	`{"source":"erp","from":"acme","to":"globex","payload":"x","payload_base64":"eA=="}`,
	`{"source":"erp","payload_base64":"not base64"}`,
	`{"source":"erp","from":"acme","to":"globex","payload":null,"extra":1}`,
	`[]`, `null`, `{"source":1}`,
}

func FuzzIngestBody(f *testing.F) {
	for _, s := range ingestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req IngestRequest
		if err := decodeStrict(data, &req); err != nil {
			refusedWell(t, err)
			return
		}
		reDecodes(t, &req)
		in, err := newMessage(req)
		if err != nil {
			refusedWell(t, err)
			return
		}
		switch {
		case req.Payload != nil && req.PayloadBase64 == nil:
			if string(in.Payload) != *req.Payload {
				t.Fatalf("payload %q stored as %q", *req.Payload, in.Payload)
			}
		case req.PayloadBase64 != nil && req.Payload == nil:
			// The bytes taken are those the text stands for, however it
			// spelled them.
			back, err := base64.StdEncoding.DecodeString(base64.StdEncoding.EncodeToString(in.Payload))
			if err != nil || !bytes.Equal(back, in.Payload) {
				t.Fatalf("payload_base64 %q taken as %x", *req.PayloadBase64, in.Payload)
			}
		default:
			t.Fatalf("accepted with payload %v and payload_base64 %v", req.Payload, req.PayloadBase64)
		}
		if in.ContentType == "" {
			t.Fatal("accepted without a content type")
		}
		if in.Source != req.Source || in.From != req.From || in.To != req.To || in.IdempotencyKey != req.IdempotencyKey ||
			in.OrderingKey != req.OrderingKey || in.DuplicateKey != req.DuplicateKey || in.CallbackURL != req.CallbackURL {
			t.Fatalf("request %+v taken as %+v", req, in)
		}
	})
}

// FuzzRequestBodies decodes a body as each request type the API reads
// but the ingest's and the receipts' (which have targets of their own).
func FuzzRequestBodies(f *testing.F) {
	seeds := []struct {
		kind int
		body string
	}{
		{0, `{"source":"erp","from":"*","to":"globex","target":"out"}`},
		{1, `{"name":"out","kind":"http","config":{"url":"https://example.com/in","headers":{"Authorization":"Bearer x"}},
		  "retry":{"strategy":"exponential","base_delay":"1s","max_delay":"5m","jitter":0.2,"max_attempts":8,"max_age":"24h"},
		  "receipt":{"timeout":"10m","correlate":{"json":"/id"}},"ordering":{"mode":"fifo","on_failure":"block","head_alert_after":"15m"}}`},
		{1, `{"name":"files","kind":"file","config":{"dir":"/tmp/out"},"enabled":false,"max_concurrent":4,"attempt_timeout":"30s"}`},
		{2, `{"name":"up","kind":"inbox_table","config":{"database_url":"postgres://u:p@127.0.0.1/db","table":"inbox"}}`},
		{2, `{"name":"drop","kind":"directory","config":{"dir":"/srv/in","pattern":"*.xml","from":"acme","to":"globex"}}`},
		{3, `{"delivery":{"max_dispatches":5},"callback_max_attempts":10,"operations":{"rate":200},
		  "retention":{"payload_after":"720h","settled_after":null,"failed_after":"2160h","archive_dir":"/var/archive"}}`},
		{4, `{"action":"redeliver","filter":{"status":["error"],"target":"out","created_after":"2026-12-01T08:00:00Z"},"reason":"outage","dry_run":true}`},
		{5, `{"reason":"enough"}`},
		{6, `{"reason":"sent by hand"}`},
		{7, `{"targets":["out","billing"],"reason":"receiver lost it"}`},
		{8, `{"reason":"again"}`},
		{0, `{"source":"erp","nope":true}`},
		{3, `{"delivery":{"max_dispatches":"5"}}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.kind), []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		var v any
		switch kind % 9 {
		case 0:
			v = &RouteRequest{}
		case 1:
			v = &lifecycle.Target{Enabled: true}
		case 2:
			v = &SourceRequest{Enabled: true}
		case 3:
			v = &lifecycle.Settings{}
		case 4:
			v = &OperationRequest{}
		case 5:
			v = &CancelRequest{}
		case 6:
			v = &SkipRequest{}
		case 7:
			v = &ResendRequest{}
		case 8:
			v = &ReplayRequest{}
		}
		if err := decodeStrict(data, v); err != nil {
			refusedWell(t, err)
			return
		}
		switch v := v.(type) {
		case *lifecycle.Target:
			// A target is answered, and edited again, with its defaults.
			d := v.WithDefaults()
			reDecodes(t, &d)
		case *OperationRequest:
			// Without an action it is refused; the action's zero value
			// has no form to encode.
			if v.Action != "" {
				reDecodes(t, v)
			}
		case *lifecycle.Settings:
			reDecodes(t, v)
			if v.Validate() == nil && v.WithDefaults().Validate() != nil {
				t.Fatalf("valid settings %+v are not valid with their defaults", *v)
			}
		default:
			reDecodes(t, v)
		}
	})
}

func FuzzReceiptBody(f *testing.F) {
	for _, s := range []string{
		`{"outcome":"positive","text":"filed"}`,
		`{"outcome":"negative","text":"unknown customer"}`,
		`{"target":"out","external_id":"INV-2026-0042","outcome":"positive","status":"ACK","code":"200","text":"booked"}`,
		`{"target":"out","external_id":"INV-2026-0042","final":false,"status":"RECEIVED"}`,
		`{"target":"out","external_id":"","outcome":"maybe"}`,
		`{"target":"Out!","external_id":"a\u0000b","final":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req ReceiptRequest
		if err := decodeStrict(data, &req); err != nil {
			refusedWell(t, err)
		} else {
			reDecodes(t, &req)
		}
		var ext ExternalReceiptRequest
		if err := decodeStrict(data, &ext); err != nil {
			refusedWell(t, err)
			return
		}
		reDecodes(t, &ext)
		in, err := externalReceiptOf(ext)
		if err != nil {
			refusedWell(t, err)
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("accepted %+v, which does not validate: %v", in, err)
		}
		if in.Final && ext.Outcome != ReceiptPositive && ext.Outcome != ReceiptNegative {
			t.Fatalf("a final receipt accepted with outcome %q", ext.Outcome)
		}
		if in.Positive != (ext.Outcome == ReceiptPositive) {
			t.Fatalf("outcome %q taken as positive %v", ext.Outcome, in.Positive)
		}
	})
}

// FuzzListQuery reads a query of GET /messages as the handler does.
func FuzzListQuery(f *testing.F) {
	cursor := projection.Cursor{CreatedAt: time.Date(2026, 12, 1, 8, 0, 0, 123000, time.UTC)}.String()
	for _, s := range []string{
		"",
		"status=error&source=erp&limit=20",
		"target=out&ordering_key=customer-7&possible_duplicate=true",
		"created_after=2026-12-01T08:00:00Z&created_before=2026-12-02T08:00:00+01:00",
		"created_after=2026-12-01T08:00:00 01:00",
		"limit=0&cursor=" + cursor,
		"limit=501&status=nope&possible_duplicate=false",
		"cursor=bm90IGEgY3Vyc29y&source=Bad%20Name",
		"status=error&status=failed",
		"a=%zz",
		"from=%FF&to=a%00&idempotency_key=k%0A",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := &http.Request{URL: &url.URL{RawQuery: raw}}
		if err := query(r, messageParams); err != nil {
			refusedWell(t, err)
			return
		}
		mf, err := messageFilterOf(r.URL.Query())
		if err != nil {
			var se *statusError
			if !errors.As(err, &se) {
				refusedWell(t, err)
			}
			return
		}
		if mf.Limit < 1 || mf.Limit > maxMessageLimit {
			t.Fatalf("limit %d accepted", mf.Limit)
		}
		for field, name := range map[string]string{"source": mf.Source, "target": mf.Target} {
			if name != "" && lifecycle.CheckName(field, name) != nil {
				t.Fatalf("%s %q accepted", field, name)
			}
		}
		if mf.OrderingKey != "" && lifecycle.CheckOrderingKey("ordering_key", mf.OrderingKey) != nil {
			t.Fatalf("ordering key %q accepted", mf.OrderingKey)
		}
		for field, party := range map[string]string{"from": mf.From, "to": mf.To} {
			if party != "" && lifecycle.CheckParty(field, party) != nil {
				t.Fatalf("%s %q accepted", field, party)
			}
		}
		if lifecycle.CheckKey("idempotency_key", mf.IdempotencyKey) != nil {
			t.Fatalf("idempotency key %q accepted", mf.IdempotencyKey)
		}
		for _, at := range []time.Time{mf.CreatedAfter, mf.CreatedBefore} {
			if at.IsZero() {
				continue
			}
			back, err := parseTime("t", at.Format(time.RFC3339Nano))
			if err != nil || !back.Equal(at) {
				t.Fatalf("time %s read back as %s, %v", at, back, err)
			}
		}
		if mf.After != nil {
			back, err := projection.ParseCursor(mf.After.String())
			if err != nil || back != *mf.After {
				t.Fatalf("cursor %+v read back as %+v, %v", *mf.After, back, err)
			}
		}
	})
}

func FuzzJournalCursor(f *testing.F) {
	f.Add(encodeJournalCursor(journal.Mark{}), uint64(0), int64(0))
	f.Add(encodeJournalCursor(journal.Mark{TxID: 7412, Position: 90311}), uint64(7412), int64(90311))
	f.Add("ajE6LTE6LTE", uint64(1)<<63, int64(1)<<62)
	f.Add("not a cursor", uint64(3), int64(-1))
	f.Fuzz(func(t *testing.T, s string, txid uint64, position int64) {
		if m, err := decodeJournalCursor(s); err != nil {
			refusedWell(t, invalid(err))
		} else {
			if m.Position < 0 {
				t.Fatalf("cursor %q accepted with position %d", s, m.Position)
			}
			if back, err := decodeJournalCursor(encodeJournalCursor(m)); err != nil || back != m {
				t.Fatalf("mark %+v read back as %+v, %v", m, back, err)
			}
		}
		if position < 0 {
			return
		}
		m := journal.Mark{TxID: txid, Position: position}
		c := encodeJournalCursor(m)
		if !utf8.ValidString(c) || url.QueryEscape(c) != c {
			t.Fatalf("cursor %q needs escaping in a query", c)
		}
		if back, err := decodeJournalCursor(c); err != nil || back != m {
			t.Fatalf("mark %+v read back as %+v, %v", m, back, err)
		}
	})
}
