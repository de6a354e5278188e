package projection

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/sources"
)

// inboxLedger is what the journal tells of an inbox_table source since it
// was last created: the rows its messages came from (their idempotency
// keys, row:<id>) and the holes it passed. The audit holds the source's
// stored watermark to it: every id up to the watermark must be a row taken,
// by it or by an earlier source of its name (Folded.earlierRows: their
// messages keep the keys, so it passes those rows as stored), or inside a
// hole it passed, and none of its holes may hold a row it took.
type inboxLedger struct {
	rows  []int64
	holes []*journal.SourceHolePassed
}

// foldSource follows the sources' configuration events and checks each
// hole passed: it must be of an inbox_table source, and have been missing
// for max_commit_delay when it was passed.
func (f *Folded) foldSource(e journal.Event) {
	switch p := e.Payload.(type) {
	case *journal.SourceCreated:
		delete(f.inboxes, p.Source.Name)
		if p.Source.Kind == sources.KindInboxTable {
			f.inboxes[p.Source.Name] = &inboxLedger{}
		}
	case *journal.SourceUpdated:
		if p.Source.Kind != sources.KindInboxTable {
			f.retireInbox(p.Source.Name)
		} else if f.inboxes[p.Source.Name] == nil {
			f.inboxes[p.Source.Name] = &inboxLedger{}
		}
	case *journal.SourceDeleted:
		f.retireInbox(p.Name)
	case *journal.SourceHolePassed:
		l := f.inboxes[p.Source]
		switch {
		case l == nil:
			f.sourceViolation(e, p.Source, "a hole passed by no inbox_table source")
		case e.RecordedAt.Sub(p.MissingSince) < p.MaxCommitDelay.D():
			f.sourceViolation(e, p.Source, fmt.Sprintf("ids %d to %d passed after %s missing, before max_commit_delay %s",
				p.From, p.To, e.RecordedAt.Sub(p.MissingSince), p.MaxCommitDelay))
		default:
			l.holes = append(l.holes, p)
		}
	}
}

// retireInbox ends the ledger of an inbox_table source deleted or made
// another kind, keeping the rows it took for the next source of its name.
func (f *Folded) retireInbox(name string) {
	if l := f.inboxes[name]; l != nil {
		f.earlierRows[name] = append(f.earlierRows[name], l.rows...)
		delete(f.inboxes, name)
	}
}

func (f *Folded) sourceViolation(e journal.Event, source, problem string) {
	f.Violations = append(f.Violations, Violation{Position: e.Position, Problem: "source " + source + ": " + problem})
}

// foldRow notes the row a new message of an inbox_table source came from.
func (f *Folded) foldRow(m *Message) {
	l := f.inboxes[m.Source]
	if l == nil {
		return
	}
	if id, ok := strings.CutPrefix(m.IdempotencyKey, sources.RowKeyPrefix); ok {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil {
			l.rows = append(l.rows, n)
		}
	}
}

// checkSources holds the stored watermark of every inbox_table source to
// the journal.
func checkSources(ctx context.Context, q journal.Querier, f *Folded) ([]Violation, error) {
	if len(f.inboxes) == 0 {
		return nil, nil
	}
	watermarks, err := sources.Watermarks(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("audit sources: %w", err)
	}
	var out []Violation
	for _, name := range slices.Sorted(maps.Keys(f.inboxes)) {
		out = append(out, f.inboxes[name].check(name, watermarks[name], f.earlierRows[name])...)
	}
	return out, nil
}

// check finds the holes that hold a row taken, and the ids up to the
// watermark that are neither a row taken, now or earlier, nor in a hole.
func (l *inboxLedger) check(name string, watermark int64, earlier []int64) []Violation {
	var out []Violation
	bad := func(problem string) { out = append(out, Violation{Problem: "source " + name + ": " + problem}) }
	rows := slices.Clone(l.rows)
	slices.Sort(rows)
	type span struct{ from, to int64 }
	spans := make([]span, 0, len(rows)+len(earlier)+len(l.holes))
	for _, id := range slices.Concat(rows, earlier) {
		spans = append(spans, span{id, id})
	}
	for _, h := range l.holes {
		if i, _ := slices.BinarySearch(rows, h.From); i < len(rows) && rows[i] <= h.To {
			bad(fmt.Sprintf("ids %d to %d were passed as a hole, but row %d of them was taken", h.From, h.To, rows[i]))
		}
		spans = append(spans, span{h.From, h.To})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var reach int64
	for _, s := range spans {
		if s.from > reach+1 {
			break
		}
		reach = max(reach, s.to)
	}
	if watermark > reach {
		bad(fmt.Sprintf("the watermark is %d, but the journal accounts for the ids up to %d only", watermark, reach))
	}
	return out
}
