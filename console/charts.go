package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// chart is a chart drawn server-side as SVG: its geometry is reckoned
// here, from the counts alone, and the template "chart" (partials.html)
// draws it, with its figures in a table for whoever cannot see it.
type chart struct {
	ID, Title string
	// Desc says in words what the chart shows: the SVG's <desc>.
	Desc string
	// Empty says no figure falls in the window.
	Empty   bool
	Ticks   []tick
	XTicks  []tick
	Bars    []bar
	Lines   []line
	Legend  []series
	Columns []string
	Rows    []chartRow
}

// The chart's box, in the SVG's units: the plot area is inside the margins.
const (
	chartWidth, chartHeight = 640, 200
	plotLeft, plotRight     = 56, 632
	plotTop, plotBottom     = 10, 176
)

// tick is a line across the plot, or a mark under it, with its label.
type tick struct {
	At    float64
	Label string
}

// bar is one rectangle of a stack.
type bar struct {
	X, Y, W, H float64
	Tone       string
	Title      string
}

// line is a series drawn as lines between the points it has: Segments
// are the runs of points without a gap, as an SVG points list, Dots the
// points with no neighbour.
type line struct {
	Tone     string
	Segments []string
	Dots     [][2]float64
}

// series is one thing a chart shows, by its tone (a colour of both
// themes, console.css's --chart-*).
type series struct {
	Label, Tone string
}

// chartRow is a row of a chart's table: the bin's time and its figures.
type chartRow struct {
	At    time.Time
	Cells []string
}

// bin is the outcomes of one bin of a chart's window.
type bin struct {
	At time.Time
	// ByOutcome counts delivered, retried and failed, as outcomeSeries.
	ByOutcome [3]int64
	// ByClass counts every outcome by its answer's class, as
	// projection.Classes.
	ByClass [5]int64
	// Latency counts the delivered by latency bucket.
	Latency []int64
}

// outcomeSeries are the outcomes the charts show, in the order of
// bin.ByOutcome.
var outcomeSeries = []series{{"Delivered", "ok"}, {"Retried", "warn"}, {"Failed", "bad"}}

// classTones are the tones of projection.Classes.
var classTones = []string{"ok", "info", "warn", "bad", "neutral"}

// window is the bins of a chart: n of step each, the last holding now.
type window struct {
	Start time.Time
	Step  time.Duration
	N     int
}

// windowTo is the window of n bins of step that ends with the bin that
// holds now.
func windowTo(now time.Time, step time.Duration, n int) window {
	last := now.UTC().Truncate(step)
	return window{Start: last.Add(-time.Duration(n-1) * step), Step: step, N: n}
}

// binOutcomes sums the counts into w's bins; counts outside it are left
// out.
func binOutcomes(counts []projection.MinuteCount, w window) []bin {
	out := make([]bin, w.N)
	for i := range out {
		out[i].At = w.Start.Add(time.Duration(i) * w.Step)
	}
	buckets := len(projection.LatencyBounds()) + 1
	for _, c := range counts {
		if c.Minute.Before(w.Start) {
			continue
		}
		i := int(c.Minute.Sub(w.Start) / w.Step)
		if i >= w.N {
			continue
		}
		b := &out[i]
		switch c.Outcome {
		case lifecycle.StateDelivered:
			b.ByOutcome[0] += c.N
			if c.Bucket >= 0 && c.Bucket < buckets {
				if b.Latency == nil {
					b.Latency = make([]int64, buckets)
				}
				b.Latency[c.Bucket] += c.N
			}
		case lifecycle.StateRetrying:
			b.ByOutcome[1] += c.N
		case lifecycle.StateFailed:
			b.ByOutcome[2] += c.N
		}
		for j, class := range projection.Classes {
			if class == c.Class {
				b.ByClass[j] += c.N
			}
		}
	}
	return out
}

// stackChart draws each bin's figures (values(b), one per series) as a
// stack of bars on a scale from 0 to a round number above the highest
// stack. per names the bin in the description ("minute").
func stackChart(id, title, per string, bins []bin, w window, ss []series, values func(bin) []int64) chart {
	c := chart{ID: id, Title: title, Legend: ss, XTicks: timeTicks(w)}
	for _, s := range ss {
		c.Columns = append(c.Columns, s.Label)
	}
	totals := make([]int64, len(ss))
	var top, peak int64
	var peakAt time.Time
	for _, b := range bins {
		vs := values(b)
		var sum int64
		for i, v := range vs {
			totals[i] += v
			sum += v
		}
		if sum > peak {
			peak, peakAt = sum, b.At
		}
		top = max(top, sum)
		if sum > 0 {
			cells := make([]string, len(vs))
			for i, v := range vs {
				cells[i] = count(v)
			}
			c.Rows = append(c.Rows, chartRow{At: b.At, Cells: cells})
		}
	}
	scale := niceCount(top)
	c.Ticks = countTicks(scale)
	width := float64(plotRight-plotLeft) / float64(w.N)
	gap := 0.0
	if width > 3 {
		gap = 1
	}
	for i, b := range bins {
		y := float64(plotBottom)
		for j, v := range values(b) {
			if v <= 0 {
				continue
			}
			h := float64(v) / float64(scale) * (plotBottom - plotTop)
			y -= h
			c.Bars = append(c.Bars, bar{X: round(plotLeft + float64(i)*width), Y: round(y), W: round(width - gap), H: round(h),
				Tone: ss[j].Tone, Title: fmt.Sprintf("%s: %s %s", stamp(b.At), count(v), strings.ToLower(ss[j].Label))})
		}
	}
	c.Empty = top == 0
	var parts []string
	for i, s := range ss {
		parts = append(parts, fmt.Sprintf("%s %s", strings.ToLower(s.Label), count(totals[i])))
	}
	c.Desc = fmt.Sprintf("From %s to %s, a bar per %s: %s in all.", stamp(w.Start),
		stamp(w.Start.Add(time.Duration(w.N)*w.Step)), per, strings.Join(parts, ", "))
	if c.Empty {
		c.Desc = fmt.Sprintf("From %s to %s: none.", stamp(w.Start), stamp(w.Start.Add(time.Duration(w.N)*w.Step)))
	} else {
		c.Desc += fmt.Sprintf(" The most in one %s: %s, at %s.", per, count(peak), stamp(peakAt))
	}
	return c
}

// latencyChart draws the p50 and p99 of each bin's time from ingest to
// delivered as lines, broken where a bin has no delivery.
func latencyChart(id, title string, bins []bin, w window) chart {
	ss := []series{{"p50", "info"}, {"p99", "other"}}
	qs := []float64{0.5, 0.99}
	c := chart{ID: id, Title: title, Legend: ss, XTicks: timeTicks(w), Columns: []string{"p50", "p99"}}
	values := make([][]time.Duration, len(bins))
	have := make([]bool, len(bins))
	var top, low time.Duration
	for i, b := range bins {
		for _, q := range qs {
			d, ok := projection.LatencyQuantile(b.Latency, q)
			if !ok {
				break
			}
			have[i] = true
			values[i] = append(values[i], d)
			top = max(top, d)
			if low == 0 || d < low {
				low = d
			}
		}
		if have[i] {
			c.Rows = append(c.Rows, chartRow{At: b.At, Cells: []string{duration(values[i][0]), duration(values[i][1])}})
		}
	}
	scale := niceDuration(top)
	for _, d := range []time.Duration{0, scale / 2, scale} {
		c.Ticks = append(c.Ticks, tick{At: round(plotBottom - float64(d)/float64(scale)*(plotBottom-plotTop)), Label: axisDuration(d)})
	}
	width := float64(plotRight-plotLeft) / float64(w.N)
	for j, s := range ss {
		l := line{Tone: s.Tone}
		var run [][2]float64
		flush := func() {
			switch len(run) {
			case 0:
			case 1:
				l.Dots = append(l.Dots, run[0])
			default:
				pts := make([]string, len(run))
				for k, p := range run {
					pts[k] = strconv.FormatFloat(p[0], 'f', -1, 64) + "," + strconv.FormatFloat(p[1], 'f', -1, 64)
				}
				l.Segments = append(l.Segments, strings.Join(pts, " "))
			}
			run = nil
		}
		for i := range bins {
			if !have[i] {
				flush()
				continue
			}
			run = append(run, [2]float64{round(plotLeft + (float64(i)+0.5)*width),
				round(plotBottom - float64(values[i][j])/float64(scale)*(plotBottom-plotTop))})
		}
		flush()
		c.Lines = append(c.Lines, l)
	}
	c.Empty = len(c.Rows) == 0
	c.Desc = fmt.Sprintf("From %s to %s: ", stamp(w.Start), stamp(w.Start.Add(time.Duration(w.N)*w.Step)))
	if c.Empty {
		c.Desc += "nothing delivered."
	} else {
		c.Desc += fmt.Sprintf("the time from ingest to delivered ranged from %s to %s.", duration(low), duration(top))
	}
	return c
}

// niceCount is the least of 1, 2 and 5 times a power of ten that is n or
// more: the top of a scale.
func niceCount(n int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}

// countTicks are the lines of a scale of counts up to top: 0, the middle
// when it is whole, and top.
func countTicks(top int64) []tick {
	values := []int64{0, top}
	if top%2 == 0 {
		values = []int64{0, top / 2, top}
	}
	out := make([]tick, len(values))
	for i, v := range values {
		out[i] = tick{At: round(plotBottom - float64(v)/float64(top)*(plotBottom-plotTop)), Label: count(v)}
	}
	return out
}

// niceDurations are the tops of the scales of latency.
var niceDurations = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
	5 * time.Second, 10 * time.Second, 20 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute,
	10 * time.Minute, 20 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// niceDuration is the least of niceDurations that is d or more, the last
// for anything longer.
func niceDuration(d time.Duration) time.Duration {
	for _, n := range niceDurations {
		if n >= d {
			return n
		}
	}
	return niceDurations[len(niceDurations)-1]
}

// axisDuration writes a scale's round duration short: 2m, not 2m0s.
func axisDuration(d time.Duration) string {
	s := duration(d)
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// timeTicks marks w's time four times, at bins' starts. A tick is the one
// time the console writes short, hours and minutes: the axis has room for
// five characters a tick, and the chart's description and table give each
// time whole.
func timeTicks(w window) []tick {
	var out []tick
	width := float64(plotRight-plotLeft) / float64(w.N)
	every := max(1, w.N/4)
	for i := 0; i < w.N; i += every {
		out = append(out, tick{At: round(plotLeft + float64(i)*width), Label: w.Start.Add(time.Duration(i) * w.Step).Format("15:04")})
	}
	return out
}

// round keeps a tenth of a unit: the SVG stays short and the same for the
// same counts.
func round(f float64) float64 {
	return float64(int64(f*10+0.5)) / 10
}

// chartSet is the charts of the dashboard or of a target: each kind for
// the last hour, then for the last 24 hours, side by side on a wide
// page.
type chartSet []chart

// The windows of the charts: the last hour by the minute, the last day
// by the quarter hour.
const (
	hourBins, dayBins = 60, 96
	dayStep           = 15 * time.Minute
)

// readMinutes reads what the charts at now show, of target or of all:
// by the minute from the quarter hour the last hour begins in, by the
// quarter hour before.
func readMinutes(ctx context.Context, q journal.Querier, target string, now time.Time) ([]projection.MinuteCount, error) {
	fine := windowTo(now, time.Minute, hourBins).Start.Truncate(dayStep)
	return projection.ReadMinutes(ctx, q, target, windowTo(now, dayStep, dayBins).Start, fine, dayStep)
}

// charts draws the charts of counts at now; prefix makes their ids
// unique on the page, and classes adds the answers' classes.
func charts(counts []projection.MinuteCount, now time.Time, prefix string, classes bool) chartSet {
	hour, day := windowTo(now, time.Minute, hourBins), windowTo(now, dayStep, dayBins)
	hourBins, dayBins := binOutcomes(counts, hour), binOutcomes(counts, day)
	outcomes := func(b bin) []int64 { return b.ByOutcome[:] }
	set := chartSet{
		stackChart(prefix+"outcomes-hour", "Outcomes per minute, last hour", "minute", hourBins, hour, outcomeSeries, outcomes),
		stackChart(prefix+"outcomes-day", "Outcomes per 15 minutes, last 24 hours", "15 minutes", dayBins, day, outcomeSeries, outcomes),
		latencyChart(prefix+"latency-hour", "Ingest to delivered, last hour", hourBins, hour),
		latencyChart(prefix+"latency-day", "Ingest to delivered, last 24 hours", dayBins, day),
	}
	if classes {
		var ss []series
		for i, class := range projection.Classes {
			ss = append(ss, series{Label: class, Tone: classTones[i]})
		}
		byClass := func(b bin) []int64 { return b.ByClass[:] }
		set = append(set, stackChart(prefix+"classes-hour", "Answers per minute by status, last hour", "minute", hourBins, hour, ss, byClass),
			stackChart(prefix+"classes-day", "Answers per 15 minutes by status, last 24 hours", "15 minutes", dayBins, day, ss, byClass))
	}
	return set
}
