package projection

import (
	"testing"
	"time"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

func TestStatusClass(t *testing.T) {
	for text, want := range map[string]string{
		"200 OK": "2xx", "302 Found to /x": "3xx", "404 Not Found": "4xx", "503 Service Unavailable: busy": "5xx",
		"": "none", "200": "none", "wrote a.json": "none", "600 Odd": "none", "2x0 X": "none",
		`Post "http://127.0.0.1:9/": dial tcp: connection refused`: "none",
	} {
		if got := statusClass(text); got != want {
			t.Errorf("statusClass(%q) = %s, want %s", text, got, want)
		}
	}
}

// TestOutcomeOf: only what moves a delivery out of an attempt or an
// awaited receipt counts, in its minute, with the class of its answer
// and, when delivered, the bucket of its time since the ingest.
func TestOutcomeOf(t *testing.T) {
	created := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := created.Add(90*time.Second + 30*time.Millisecond)
	ev := func(from, to lifecycle.DeliveryState, p journal.Payload) journal.Event {
		return journal.Event{RecordedAt: at, Target: "alpha", OldState: from, NewState: to, Payload: p}
	}
	attempted := func(o lifecycle.Outcome) *journal.DeliveryAttempted { return &journal.DeliveryAttempted{Outcome: o} }
	minute := created.Add(time.Minute).Unix()
	for _, c := range []struct {
		name string
		e    journal.Event
		want minuteKey
		ok   bool
	}{
		{"delivered", ev("delivering", "delivered", attempted(lifecycle.Delivered("204 No Content"))),
			minuteKey{"alpha", minute, "delivered", "2xx", latencyBucket(at.Sub(created))}, true},
		{"retried", ev("delivering", "retrying", attempted(lifecycle.Retry(at, "503 Busy"))),
			minuteKey{"alpha", minute, "retrying", "5xx", noBucket}, true},
		{"lease expired", ev("delivering", "retrying", &journal.DeliveryLeaseExpired{}),
			minuteKey{"alpha", minute, "retrying", "none", noBucket}, true},
		{"handed over", ev("delivering", "awaiting_ack", attempted(lifecycle.AwaitingAck("202 Accepted", at))),
			minuteKey{"alpha", minute, "awaiting_ack", "2xx", noBucket}, true},
		{"receipt", ev("awaiting_ack", "delivered", &journal.ReceiptReceived{Positive: true}),
			minuteKey{"alpha", minute, "delivered", "none", latencyBucket(at.Sub(created))}, true},
		{"intermediate receipt", ev("awaiting_ack", "awaiting_ack", &journal.ReceiptIntermediate{}), minuteKey{}, false},
		{"claim", ev("queued", "delivering", &journal.DeliveryClaimed{}), minuteKey{}, false},
		{"released unstarted", ev("delivering", "queued", &journal.DeliveryReleased{}), minuteKey{}, false},
		{"wake-up", ev("retrying", "retrying", &journal.DeliveryWoken{}), minuteKey{}, false},
		{"redelivered", ev("failed", "queued", &journal.DeliveryRedelivered{}), minuteKey{}, false},
	} {
		got, ok := outcomeOf(&c.e, created)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestLatencyBucketsAndQuantiles(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {5 * time.Millisecond, 0}, {6 * time.Millisecond, 1}, {10 * time.Millisecond, 1}, {time.Second, 8}, {24 * time.Hour, len(latencyBounds)}} {
		if got := latencyBucket(c.d); got != c.want {
			t.Errorf("latencyBucket(%s) = %d, want %d", c.d, got, c.want)
		}
	}
	counts := make([]int64, len(latencyBounds)+1)
	if _, ok := LatencyQuantile(counts, 0.5); ok {
		t.Error("a quantile of nothing")
	}
	counts[1] = 100 // (5 ms, 10 ms]
	for q, want := range map[float64]time.Duration{0.5: 7500 * time.Microsecond, 0.99: 9950 * time.Microsecond} {
		if got, ok := LatencyQuantile(counts, q); !ok || got != want {
			t.Errorf("quantile %v = %s, want %s", q, got, want)
		}
	}
	counts[len(latencyBounds)] = 100
	if got, _ := LatencyQuantile(counts, 0.99); got != latencyBounds[len(latencyBounds)-1] {
		t.Errorf("a quantile past the last bound = %s", got)
	}
}
