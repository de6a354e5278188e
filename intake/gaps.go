package intake

import "time"

// gap is a run of ids missing between rows an inbox source has taken:
// ids of upstream transactions not yet committed, or of ones that rolled
// back (a permanent hole). since is when the source first saw it.
type gap struct {
	from, to int64
	since    time.Time
}

// gaps are the runs of ids missing above an inbox's watermark and below
// the highest id it took, in order and apart. Every other id in that
// range has been taken.
type gaps []gap

// add appends the run from to (inclusive), above every run held.
func (g *gaps) add(from, to int64, since time.Time) {
	if from <= to {
		*g = append(*g, gap{from, to, since})
	}
}

// take removes an id found after all: the run that holds it is cut in
// two, keeping its time.
func (g *gaps) take(id int64) {
	for i, r := range *g {
		if id < r.from || id > r.to {
			continue
		}
		var parts []gap
		if r.from < id {
			parts = append(parts, gap{r.from, id - 1, r.since})
		}
		if id < r.to {
			parts = append(parts, gap{id + 1, r.to, r.since})
		}
		*g = append((*g)[:i], append(parts, (*g)[i+1:]...)...)
		return
	}
}

// watermark is the highest id up to which every id is taken or passed:
// just below the first run, or the frontier when none is missing.
func (g gaps) watermark(frontier int64) int64 {
	if len(g) == 0 {
		return frontier
	}
	return g[0].from - 1
}

// bounds lists the runs' first and last ids, for a query.
func (g gaps) bounds() (from, to []int64) {
	for _, r := range g {
		from, to = append(from, r.from), append(to, r.to)
	}
	return from, to
}
