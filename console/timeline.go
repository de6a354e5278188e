package console

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// timeline is a message's life drawn from its journal as SVG: a row for
// the message, one for each delivery, one for its callback; each attempt
// a bar from its claim to its outcome, everything else a mark. Steps are
// its text alternative, in the order of the events.
type timeline struct {
	Desc   string
	Height int
	Rows   []tick
	XTicks []tick
	Bars   []bar
	Marks  []mark
	Steps  []step
}

// mark is a point of a timeline: what happened at once.
type mark struct {
	X, Y  float64
	Tone  string
	Title string
}

// step is one line of a timeline's text: when, on which row, what.
type step struct {
	At     time.Time
	Offset string
	Row    string
	What   string
}

// The timeline's box: labels on the left, then the plot.
const (
	timelineLeft, timelineRight = 168, 616
	timelineRow                 = 28
	timelineTop                 = 8
	timelineMinBar              = 2
)

// buildTimeline draws the events of m's stream.
func buildTimeline(m *projection.Message, events []journal.Event) timeline {
	var tl timeline
	if len(events) == 0 {
		return tl
	}
	rows := map[uuid.UUID]int{uuid.Nil: 0}
	labels := []string{"Message"}
	for _, d := range m.Deliveries {
		rows[d.ID] = len(labels)
		label := d.Target
		if m.Generation > 1 {
			label += fmt.Sprintf(" (send %d)", d.Generation)
		}
		labels = append(labels, label)
	}
	callbackRow := -1
	for _, e := range events {
		if strings.HasPrefix(string(e.Kind()), "message.callback_") {
			callbackRow = len(labels)
			labels = append(labels, "Callback")
			break
		}
	}
	start, end := events[0].RecordedAt, events[len(events)-1].RecordedAt
	span := max(end.Sub(start), time.Millisecond)
	x := func(t time.Time) float64 {
		return round(timelineLeft + float64(t.Sub(start))/float64(span)*(timelineRight-timelineLeft))
	}
	y := func(row int) float64 { return float64(timelineTop + row*timelineRow) }
	for i, l := range labels {
		tl.Rows = append(tl.Rows, tick{At: y(i) + timelineRow/2, Label: l})
	}
	tl.Height = timelineTop + len(labels)*timelineRow + 24
	for i := range 5 {
		t := start.Add(span * time.Duration(i) / 4)
		tl.XTicks = append(tl.XTicks, tick{At: x(t), Label: "+" + duration(t.Sub(start))})
	}
	// The claim each attempt began with, by delivery (uuid.Nil: the callback).
	claimed := map[uuid.UUID]time.Time{}
	var attempts, longest time.Duration
	var n int
	for _, e := range events {
		row, label := 0, "Message"
		if e.DeliveryID != uuid.Nil {
			row = rows[e.DeliveryID]
			label = labels[row]
		}
		what, tone := e.Text(), "neutral"
		took := time.Duration(-1)
		switch p := e.Payload.(type) {
		case *journal.MessageAccepted:
			what, tone = "ingested", "info"
		case *journal.MessageRefused:
			tone = "bad"
		case *journal.DeliveryClaimed:
			claimed[e.DeliveryID] = e.RecordedAt
			continue
		case *journal.CallbackClaimed:
			claimed[uuid.Nil] = e.RecordedAt
			continue
		case *journal.DeliveryAttempted:
			tone, took = outcomeTone(p.Outcome.Kind), e.RecordedAt.Sub(claimed[e.DeliveryID])
		case *journal.DeliveryReleased, *journal.DeliveryLeaseExpired:
			tone, took = "warn", e.RecordedAt.Sub(claimed[e.DeliveryID])
		case *journal.CallbackAttempted:
			row, label = callbackRow, "Callback"
			tone, took = outcomeTone(p.Outcome.Kind), e.RecordedAt.Sub(claimed[uuid.Nil])
		case *journal.CallbackReleased, *journal.CallbackLeaseExpired:
			row, label = callbackRow, "Callback"
			tone, took = "warn", e.RecordedAt.Sub(claimed[uuid.Nil])
		case *journal.ReceiptReceived:
			tone = "ok"
			if !p.Positive {
				tone = "bad"
			}
		case *journal.ReceiptTimedOut, *journal.DeliveryStalled:
			tone = "bad"
		}
		if name := journal.OperatorName(e.Actor); name != e.Actor {
			what, tone = what+", by "+name, "other"
		}
		s := step{At: e.RecordedAt, Offset: "+" + duration(e.RecordedAt.Sub(start)), Row: label, What: what}
		if took >= 0 {
			from := e.RecordedAt.Add(-took)
			w := max(x(e.RecordedAt)-x(from), timelineMinBar)
			tl.Bars = append(tl.Bars, bar{X: x(from), Y: y(row) + 6, W: round(w), H: timelineRow - 12, Tone: tone,
				Title: fmt.Sprintf("%s: %s, took %s", label, what, duration(took))})
			s.What += ", took " + duration(took)
			attempts += took
			longest = max(longest, took)
			n++
		} else {
			tl.Marks = append(tl.Marks, mark{X: x(e.RecordedAt), Y: y(row) + timelineRow/2, Tone: tone, Title: label + ": " + what})
		}
		tl.Steps = append(tl.Steps, s)
	}
	tl.Desc = fmt.Sprintf("%d events over %s from the ingest", len(events), duration(end.Sub(start)))
	if n > 0 {
		tl.Desc += fmt.Sprintf("; %d attempts and calls, %s in all, the longest %s", n, duration(attempts), duration(longest))
	}
	tl.Desc += "."
	return tl
}

// outcomeTone is the tone of an outcome's mark.
func outcomeTone(k lifecycle.OutcomeKind) string {
	switch k {
	case lifecycle.OutcomeDelivered:
		return "ok"
	case lifecycle.OutcomeAwaitingAck:
		return "info"
	case lifecycle.OutcomeRetry:
		return "warn"
	}
	return "bad"
}
