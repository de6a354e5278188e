package commands_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
)

// TestIdempotencyConflict: a repeated key whose message differs from the
// one held, in its payload, parties, ordering key or callback URL, is
// refused naming the fields, through Ingest and IngestMany alike, and
// stores nothing; an identical repeat returns the message held, and so
// does one whose content type alone differs. The payload's SHA-256 still
// decides once retention expunged the payload.
func TestIdempotencyConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("order 1"), IdempotencyKey: "k1",
		OrderingKey: "lane", CallbackURL: "https://erp.example/cb"}
	first, _, err := b.w.Ingest(b.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*commands.NewMessage)
		fields []string
	}{
		{"payload", func(m *commands.NewMessage) { m.Payload = []byte("order 2") }, []string{"payload"}},
		{"no payload", func(m *commands.NewMessage) { m.Payload = nil }, []string{"payload"}},
		{"parties", func(m *commands.NewMessage) { m.From, m.To = "x", "y" }, []string{"from", "to"}},
		{"ordering key", func(m *commands.NewMessage) { m.OrderingKey = "" }, []string{"ordering_key"}},
		{"callback", func(m *commands.NewMessage) { m.CallbackURL = "https://evil.example/" }, []string{"callback_url"}},
		{"all", func(m *commands.NewMessage) {
			*m = commands.NewMessage{Source: "erp", From: "x", To: "b", Payload: []byte("?"), IdempotencyKey: "k1"}
		}, []string{"payload", "from", "ordering_key", "callback_url"}},
	} {
		again := in
		tc.change(&again)
		_, _, err := b.w.Ingest(b.ctx, again)
		var conflict *commands.IdempotencyConflictError
		if !errors.Is(err, commands.ErrIdempotencyConflict) || !errors.As(err, &conflict) || !slices.Equal(conflict.Fields, tc.fields) {
			t.Errorf("%s: %v", tc.name, err)
		}
		res := b.w.IngestMany(b.ctx, []commands.NewMessage{again, {Source: "erp", From: "a", To: "b", Payload: []byte("new")}})
		if !errors.As(res[0].Err, &conflict) || !slices.Equal(conflict.Fields, tc.fields) || res[0].Message != nil ||
			res[1].Err != nil || !res[1].Created {
			t.Errorf("%s in a batch: %+v", tc.name, res)
		}
	}
	same := in
	same.ContentType = "text/plain"
	for _, repeat := range []commands.NewMessage{in, same} {
		m, created, err := b.w.Ingest(b.ctx, repeat)
		if err != nil || created || m.ID != first.ID {
			t.Fatalf("identical repeat: %v %v %v", m, created, err)
		}
	}

	plain := commands.NewMessage{Source: "erp", From: "a", To: "b", Payload: []byte("kept"), IdempotencyKey: "k2"}
	m, _, err := b.w.Ingest(b.ctx, plain)
	if err != nil || m.Status != lifecycle.StatusNotRouted {
		t.Fatalf("%+v %v", m, err)
	}
	settings := lifecycle.DefaultSettings()
	settings.Retention.PayloadAfter = new(lifecycle.Duration(time.Hour))
	if err := b.w.SetSettings(b.ctx, settings, admin); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Hour)
	if done, err := b.w.ExpungePayload(b.ctx, m.ID); !done || err != nil {
		t.Fatalf("expunge: %v %v", done, err)
	}
	if got, created, err := b.w.Ingest(b.ctx, plain); err != nil || created || got.ID != m.ID || !got.PayloadExpunged {
		t.Errorf("identical repeat of an expunged message: %+v %v %v", got, created, err)
	}
	plain.Payload = []byte("other")
	if _, _, err := b.w.Ingest(b.ctx, plain); !errors.Is(err, commands.ErrIdempotencyConflict) {
		t.Errorf("other payload for an expunged message: %v", err)
	}
	b.audit(t)
}
