package console

import (
	"bytes"
	"html/template"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// at is a minute of the charts' tests.
func at(h, m int) time.Time { return time.Date(2026, 12, 1, h, m, 0, 0, time.UTC) }

func outcome(minute time.Time, o lifecycle.DeliveryState, class string, bucket int, n int64) projection.MinuteCount {
	return projection.MinuteCount{Minute: minute, Outcome: o, Class: class, Bucket: bucket, N: n}
}

func TestNiceScales(t *testing.T) {
	for n, want := range map[int64]int64{0: 1, 1: 1, 2: 2, 3: 5, 5: 5, 6: 10, 11: 20, 999: 1000, 1001: 2000} {
		if got := niceCount(n); got != want {
			t.Errorf("niceCount(%d) = %d, want %d", n, got, want)
		}
	}
	for d, want := range map[time.Duration]time.Duration{0: 10 * time.Millisecond, 11 * time.Millisecond: 20 * time.Millisecond,
		3 * time.Second: 5 * time.Second, 90 * time.Second: 2 * time.Minute, 48 * time.Hour: 24 * time.Hour} {
		if got := niceDuration(d); got != want {
			t.Errorf("niceDuration(%s) = %s, want %s", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 5 * time.Millisecond: "5ms", 2 * time.Second: "2s", time.Minute: "1m",
		90 * time.Second: "1m30s", time.Hour: "1h", 12 * time.Hour: "12h"} {
		if got := axisDuration(d); got != want {
			t.Errorf("axisDuration(%s) = %s, want %s", d, got, want)
		}
	}
	for top, want := range map[int64][]string{1: {"0", "1"}, 5: {"0", "5"}, 10: {"0", "5", "10"}, 2000: {"0", "1,000", "2,000"}} {
		var got []string
		for _, tk := range countTicks(top) {
			got = append(got, tk.Label)
		}
		if !slices.Equal(got, want) {
			t.Errorf("countTicks(%d) = %v, want %v", top, got, want)
		}
	}
}

// TestBinOutcomes: the counts fall in the bins of their minute, the last
// bin holds now, and what lies outside the window is left out.
func TestBinOutcomes(t *testing.T) {
	w := windowTo(at(9, 7), dayStep, 4) // 08:15, 08:30, 08:45, 09:00
	if !w.Start.Equal(at(8, 15)) {
		t.Fatalf("window starts %s", w.Start)
	}
	bins := binOutcomes([]projection.MinuteCount{
		outcome(at(8, 14), "delivered", "2xx", 3, 100), // before the window
		outcome(at(8, 15), "delivered", "2xx", 3, 1),
		outcome(at(8, 29), "retrying", "5xx", -1, 2),
		outcome(at(8, 29), "awaiting_ack", "2xx", -1, 4),
		outcome(at(9, 7), "failed", "4xx", -1, 3),
		outcome(at(9, 15), "failed", "4xx", -1, 100), // after
	}, w)
	want := []bin{
		{At: at(8, 15), ByOutcome: [3]int64{1, 2, 0}, ByClass: [5]int64{5, 0, 0, 2, 0}},
		{At: at(8, 30)},
		{At: at(8, 45)},
		{At: at(9, 0), ByOutcome: [3]int64{0, 0, 3}, ByClass: [5]int64{0, 0, 3, 0, 0}},
	}
	for i := range want {
		got := bins[i]
		if !got.At.Equal(want[i].At) || got.ByOutcome != want[i].ByOutcome || got.ByClass != want[i].ByClass {
			t.Errorf("bin %d = %+v, want %+v", i, got, want[i])
		}
	}
	if bins[0].Latency[3] != 1 || bins[3].Latency != nil {
		t.Errorf("latencies %v, %v", bins[0].Latency, bins[3].Latency)
	}
}

// TestStackChart draws bars on a round scale: none for no data, a lone
// one, gaps left empty, a stack's parts one above the other; the table
// holds the bins with any figure.
func TestStackChart(t *testing.T) {
	w := windowTo(at(9, 3), time.Minute, 4) // 09:00 … 09:03, 144 units a bin
	outcomes := func(b bin) []int64 { return b.ByOutcome[:] }
	draw := func(counts ...projection.MinuteCount) chart {
		return stackChart("c", "Outcomes", "minute", binOutcomes(counts, w), w, outcomeSeries, outcomes)
	}
	empty := draw()
	if !empty.Empty || len(empty.Bars) != 0 || len(empty.Rows) != 0 || empty.Desc != "From 2026-12-01T09:00:00Z to 2026-12-01T09:04:00Z: none." {
		t.Errorf("empty: %+v", empty)
	}
	one := draw(outcome(at(9, 1), "delivered", "2xx", 0, 1))
	wantBars := []bar{{X: 200, Y: 10, W: 143, H: 166, Tone: "ok", Title: "2026-12-01T09:01:00Z: 1 delivered"}}
	if one.Empty || !slices.Equal(one.Bars, wantBars) {
		t.Errorf("one point: %+v, want %+v", one.Bars, wantBars)
	}
	if len(one.Ticks) != 2 || one.Ticks[1].Label != "1" || one.Ticks[1].At != 10 {
		t.Errorf("ticks %+v", one.Ticks)
	}
	stacked := draw(outcome(at(9, 0), "delivered", "2xx", 0, 3), outcome(at(9, 0), "failed", "4xx", -1, 1),
		outcome(at(9, 3), "retrying", "5xx", -1, 2))
	// A scale to 5: 33.2 units a count.
	wantBars = []bar{
		{X: 56, Y: 76.4, W: 143, H: 99.6, Tone: "ok", Title: "2026-12-01T09:00:00Z: 3 delivered"},
		{X: 56, Y: 43.2, W: 143, H: 33.2, Tone: "bad", Title: "2026-12-01T09:00:00Z: 1 failed"},
		{X: 488, Y: 109.6, W: 143, H: 66.4, Tone: "warn", Title: "2026-12-01T09:03:00Z: 2 retried"},
	}
	if !slices.Equal(stacked.Bars, wantBars) {
		t.Errorf("stacked:\n%+v\nwant\n%+v", stacked.Bars, wantBars)
	}
	if len(stacked.Rows) != 2 || !slices.Equal(stacked.Rows[0].Cells, []string{"3", "0", "1"}) {
		t.Errorf("rows %+v", stacked.Rows)
	}
	wantDesc := "From 2026-12-01T09:00:00Z to 2026-12-01T09:04:00Z, a bar per minute: delivered 3, retried 2, failed 1 in all. The most in one minute: 4, at 2026-12-01T09:00:00Z."
	if stacked.Desc != wantDesc {
		t.Errorf("desc %q", stacked.Desc)
	}
}

// TestLatencyChart: a line through the bins with deliveries, broken at a
// gap, a lone point drawn as a dot, and nothing for no deliveries.
func TestLatencyChart(t *testing.T) {
	w := windowTo(at(9, 4), time.Minute, 5)
	draw := func(counts ...projection.MinuteCount) chart {
		return latencyChart("l", "Latency", binOutcomes(counts, w), w)
	}
	if c := draw(outcome(at(9, 1), "failed", "4xx", -1, 1)); !c.Empty || len(c.Lines[0].Segments)+len(c.Lines[0].Dots) != 0 ||
		c.Desc != "From 2026-12-01T09:00:00Z to 2026-12-01T09:05:00Z: nothing delivered." {
		t.Errorf("no deliveries: %+v", c)
	}
	// Bucket 1 is (5 ms, 10 ms]: p50 7.5 ms, p99 9.95 ms, on a scale to 10 ms.
	c := draw(outcome(at(9, 0), "delivered", "2xx", 1, 10), outcome(at(9, 1), "delivered", "2xx", 1, 10),
		outcome(at(9, 3), "delivered", "2xx", 1, 10))
	p50 := c.Lines[0]
	if want := []string{"113.6,51.5 228.8,51.5"}; !slices.Equal(p50.Segments, want) {
		t.Errorf("segments %v, want %v", p50.Segments, want)
	}
	if want := [][2]float64{{459.2, 51.5}}; !slices.Equal(p50.Dots, want) {
		t.Errorf("dots %v, want %v", p50.Dots, want)
	}
	if len(c.Rows) != 3 || !slices.Equal(c.Rows[0].Cells, []string{"8ms", "10ms"}) {
		t.Errorf("rows %+v", c.Rows)
	}
	if c.Ticks[2].Label != "10ms" {
		t.Errorf("ticks %+v", c.Ticks)
	}
}

// TestChartTemplate draws charts as the pages do: an SVG with its title
// and description, role img, and the table of its figures.
func TestChartTemplate(t *testing.T) {
	v := &views{}
	tpl, err := template.New("").Funcs(v.funcs()).ParseFS(files, partialsFile)
	if err != nil {
		t.Fatal(err)
	}
	set := charts([]projection.MinuteCount{outcome(at(9, 1), "delivered", "2xx", 4, 2)}, at(9, 2), "x-", true)
	var out bytes.Buffer
	if err := tpl.ExecuteTemplate(&out, "charts", set); err != nil {
		t.Fatal(err)
	}
	html := out.String()
	for _, want := range []string{
		`<svg role="img" aria-labelledby="x-outcomes-hour-title x-outcomes-hour-desc"`,
		`<title id="x-outcomes-hour-title">Outcomes per minute, last hour</title>`,
		`<rect class="ink-ok"`, `<circle class="ink-info"`, `<summary>The figures of “Answers per 15 minutes by status, last 24 hours”</summary>`,
		`<td data-label="From"><time datetime="2026-12-01T09:01:00Z">2026-12-01T09:01:00Z</time></td><td class="num" data-label="Delivered">2</td>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("no %s in\n%s", want, html)
		}
	}
	if n := strings.Count(html, `role="img"`); n != 6 {
		t.Errorf("%d charts, want 6", n)
	}
}

// TestTimeline: each attempt a bar from its claim to its outcome, as long
// as it took (at least a sliver), everything else a mark on its row, and
// every step in words.
func TestTimeline(t *testing.T) {
	if tl := buildTimeline(&projection.Message{}, nil); len(tl.Steps) != 0 || tl.Height != 0 {
		t.Errorf("no events: %+v", tl)
	}
	d := uuid.New()
	m := &projection.Message{Generation: 1, Deliveries: []projection.Delivery{{ID: d, Target: "billing", Generation: 1}}}
	t0 := at(9, 0)
	ev := func(after time.Duration, actor string, p journal.Payload, delivery uuid.UUID) journal.Event {
		return journal.Event{RecordedAt: t0.Add(after), Actor: actor, Payload: p, DeliveryID: delivery}
	}
	tl := buildTimeline(m, []journal.Event{
		ev(0, "source:erp", &journal.MessageAccepted{}, uuid.Nil),
		ev(0, "system", &journal.MessageDispatched{}, uuid.Nil),
		ev(time.Second, "worker", &journal.DeliveryClaimed{Attempt: 1}, d),
		ev(1200*time.Millisecond, "worker", &journal.DeliveryAttempted{Attempt: 1, Outcome: lifecycle.Retry(t0, "503 Busy")}, d),
		ev(3*time.Second, "operator:ada", &journal.DeliveryRedelivered{}, d),
		ev(3*time.Second+time.Millisecond, "worker", &journal.DeliveryClaimed{Attempt: 2}, d),
		ev(4*time.Second, "worker", &journal.DeliveryAttempted{Attempt: 2, Outcome: lifecycle.Delivered("200 OK")}, d),
	})
	// 448 units over 4 s: 112 a second.
	wantBars := []bar{
		{X: 280, Y: 42, W: 22.4, H: 16, Tone: "warn", Title: "billing: attempt 1: retry at 2026-12-01T09:00:00Z: 503 Busy, took 200ms"},
		{X: 504.1, Y: 42, W: 111.9, H: 16, Tone: "ok", Title: "billing: attempt 2: delivered: 200 OK, took 999ms"},
	}
	if !slices.Equal(tl.Bars, wantBars) {
		t.Errorf("bars\n%+v\nwant\n%+v", tl.Bars, wantBars)
	}
	if len(tl.Marks) != 3 || tl.Marks[0].Tone != "info" || tl.Marks[2].Tone != "other" || tl.Marks[2].Y != 50 {
		t.Errorf("marks %+v", tl.Marks)
	}
	var steps []string
	for _, s := range tl.Steps {
		steps = append(steps, s.Offset+" "+s.Row+": "+s.What)
	}
	if len(steps) != 5 || steps[0] != "+0s Message: ingested" || !strings.HasSuffix(steps[3], ", by ada") ||
		steps[4] != "+4s billing: attempt 2: delivered: 200 OK, took 999ms" {
		t.Errorf("steps\n%s", strings.Join(steps, "\n"))
	}
	if want := "7 events over 4s from the ingest; 2 attempts and calls, 1s in all, the longest 999ms."; tl.Desc != want {
		t.Errorf("desc %q, want %q", tl.Desc, want)
	}
	if tl.Height != 8+2*28+24 {
		t.Errorf("height %d", tl.Height)
	}
}
