package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/httpapi"
)

// TestUnknownIDsAreNotFound: every command the API runs on a message or a
// delivery answers an id nothing has, the nil UUID among them, with 404
// NOT_FOUND and writes nothing; the Writer serves on after all of them,
// each sent twice, and an ingest is answered in time.
func TestUnknownIDsAreNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b.ctx = ctx // a wedged Writer fails the test rather than hang it
	b.target(t, "billing", nil)
	m := b.ingest(t, ingestToken, httpapi.IngestRequest{})
	known, knownDelivery := m.ID.String(), m.Deliveries[0].ID.String()
	before := b.counts(t)
	for _, unknown := range []string{uuid.Nil.String(), uuid.NewString()} {
		paths := []string{
			"/messages/" + unknown + "/redispatch",
			"/messages/" + unknown + "/resend",
			"/messages/" + unknown + "/replay",
			"/messages/" + unknown + "/deliveries/" + unknown + "/redeliver",
			"/messages/" + unknown + "/deliveries/" + unknown + "/skip",
			"/messages/" + unknown + "/deliveries/" + knownDelivery + "/redeliver",
			"/messages/" + unknown + "/deliveries/" + knownDelivery + "/skip",
			"/messages/" + known + "/deliveries/" + unknown + "/redeliver",
			"/messages/" + known + "/deliveries/" + unknown + "/skip",
			"/operations/" + unknown + "/cancel",
		}
		for _, path := range paths {
			for range 2 {
				b.act(t, path, "", nil).fails(t, http.StatusNotFound, httpapi.CodeNotFound)
			}
		}
		for range 2 {
			b.admin(t, http.MethodPost, "/deliveries/"+unknown+"/receipt", httpapi.ReceiptRequest{Outcome: httpapi.ReceiptPositive}).
				fails(t, http.StatusNotFound, httpapi.CodeNotFound)
		}
	}
	b.unchanged(t, before)
	b.ingest(t, ingestToken, httpapi.IngestRequest{})
}
