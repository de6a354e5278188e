package projection_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
)

func TestLoadPayloadReadsAtMostTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := bytes.Repeat([]byte("0123456789"), 100)
	m, _, err := b.w.Ingest(b.ctx, commands.NewMessage{Source: "erp", From: "a", To: "b", ContentType: "text/csv", Payload: body})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit int
		want  []byte
	}{{0, body}, {-1, body}, {5, body[:5]}, {1000, body}, {5000, body}} {
		p, err := projection.LoadPayload(b.ctx, b.db, m.ID, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if p.ContentType != "text/csv" || p.Size != int64(len(body)) || !bytes.Equal(p.Body, tc.want) {
			t.Errorf("limit %d: %q, %d bytes of %d, want %d bytes of %d", tc.limit, p.ContentType, len(p.Body), p.Size, len(tc.want), len(body))
		}
	}
	if _, err := projection.LoadPayload(b.ctx, b.db, uuid.New(), 0); !errors.Is(err, projection.ErrNotFound) {
		t.Errorf("payload of no message: %v, want ErrNotFound", err)
	}
}
