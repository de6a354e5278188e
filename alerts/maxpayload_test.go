package alerts_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/alerts"
	"github.com/waybill/waybill/internal/testlog"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/service"
)

// smallPayload is the max payload of the NATS server of these tests: an
// event or an alert of a failure of 20 KiB is over it.
const smallPayload = 8 << 10

// logTo is a Base whose logger writes to l.
func logTo(l *testlog.Buffer) service.Base {
	return service.Base{Logger: slog.New(slog.NewTextHandler(l, nil))}
}

// TestEventStreamPublishesAnEventTooBigWithoutItsPayload: an event over the
// server's max payload goes out in its place without its payload, which
// it sizes, with a warning, and the events after it go out as ever.
func TestEventStreamPublishesAnEventTooBigWithoutItsPayload(t *testing.T) {
	t.Parallel()
	e := setupWith(t, smallPayload)
	got := e.subscribe(t, "waybill.events.>")
	reg := prometheus.NewRegistry()
	log := &testlog.Buffer{}
	s, err := alerts.NewEventStream(alerts.StreamConfig{DB: e.db, NATS: e.connect(t), PollInterval: 10 * time.Millisecond,
		Metrics: reg, Base: logTo(log)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	e.route(t)
	e.fail(t, strings.Repeat("x", 20<<10))
	e.notRouted(t)

	want := e.feedOrder(t)
	testpoll.Until(t, "every event published", func() bool {
		return len(got.all()) >= len(want) && caughtUp(t, reg, alerts.StreamGroup)
	})
	msgs := got.all()
	if len(msgs) != len(want) {
		t.Fatalf("%d events published, want %d", len(msgs), len(want))
	}
	var reduced int64
	for i, m := range msgs {
		var body struct {
			Position            int64           `json:"position"`
			Kind                journal.Kind    `json:"kind"`
			DeliveryID          string          `json:"delivery_id"`
			Payload             json.RawMessage `json:"payload"`
			PayloadOmittedBytes int             `json:"payload_omitted_bytes"`
		}
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if m.Subject != "waybill.events."+w.Kind || m.Header.Get(nats.MsgIdHdr) != strconv.FormatInt(w.Position, 10) ||
			body.Position != w.Position || string(body.Kind) != w.Kind {
			t.Errorf("message %d: %s id %s position %d, want %s at %d", i, m.Subject, m.Header.Get(nats.MsgIdHdr), body.Position, w.Kind, w.Position)
		}
		if body.PayloadOmittedBytes == 0 {
			if _, err := journal.Decode(body.Kind, body.Payload); err != nil {
				t.Errorf("payload of %d: %v", body.Position, err)
			}
			continue
		}
		reduced = body.Position
		if body.Kind != journal.KindDeliveryAttempted || body.Payload != nil || body.PayloadOmittedBytes < 20<<10 ||
			body.DeliveryID == "" || len(m.Data) > smallPayload {
			t.Errorf("published without its payload: %s", m.Data)
		}
	}
	if reduced == 0 {
		t.Fatal("no event published without its payload")
	}
	if warned := log.Lines("event too big for NATS"); len(warned) != 1 || !strings.Contains(warned[0], "level=WARN") ||
		!strings.Contains(warned[0], "position="+strconv.FormatInt(reduced, 10)) {
		t.Errorf("warnings %q", warned)
	}
}

// TestAlertTooBigForNATSIsPublishedCut: an alert over the server's max
// payload goes out on NATS with its texts cut, marked truncated, with a
// warning, and the alerts after it go out as ever; the webhook gets it
// whole.
func TestAlertTooBigForNATSIsPublishedCut(t *testing.T) {
	t.Parallel()
	e := setupWith(t, smallPayload)
	got := e.subscribe(t, "waybill.alerts.>")
	log := &testlog.Buffer{}
	a, err := alerts.New(alerts.Config{DB: e.db, NATS: e.connect(t), WebhookURL: e.hook.URL,
		SendBackoff: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond, Base: logTo(log)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop(context.Background()) })
	e.route(t)
	reason := strings.Repeat("x", 20<<10)
	e.fail(t, reason)
	e.notRouted(t)

	testpoll.Until(t, "both alerts sent both ways", func() bool { return len(got.all()) == 2 && e.allSent(t, 2) })
	var sent []alerts.Alert
	for _, m := range got.all() {
		var al alerts.Alert
		if err := json.Unmarshal(m.Data, &al); err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(nats.MsgIdHdr) != al.ID || m.Subject != "waybill.alerts."+string(al.Code) || len(m.Data) > smallPayload {
			t.Errorf("alert %s on %s with id %s, %d bytes", al.ID, m.Subject, m.Header.Get(nats.MsgIdHdr), len(m.Data))
		}
		sent = append(sent, al)
	}
	failed, after := sent[0], sent[1]
	detail, _ := failed.Details["error"].(string)
	if failed.Code != alerts.CodeMessageFailed || !failed.Truncated || !strings.HasSuffix(failed.Summary, "x"+lifecycle.CutMark) ||
		!strings.HasSuffix(detail, "x"+lifecycle.CutMark) || len(detail) > 1024 || failed.Details["source"] != "erp" {
		t.Errorf("the alert too big, as published: %+v", failed)
	}
	if after.Code != alerts.CodeMessageNotRouted || after.Truncated {
		t.Errorf("the alert after it: %+v", after)
	}
	e.hook.mu.Lock()
	whole := e.hook.accepted[failed.ID]
	e.hook.mu.Unlock()
	if whole.Truncated || whole.Details["error"] != reason {
		t.Errorf("the webhook's copy is not whole: truncated %v, error %.40v", whole.Truncated, whole.Details["error"])
	}
	if warned := log.Lines("alert too big for NATS"); len(warned) != 1 || !strings.Contains(warned[0], "id="+failed.ID) {
		t.Errorf("warnings %q", warned)
	}
}
