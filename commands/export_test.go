package commands

import "github.com/jackc/pgx/v5"

// SetCut makes the Writer queue statements at the named points of every
// command's batch: "projected" (after the projection writes) and "appended"
// (after the journal events, before the payload and the commit).
func (w *Writer) SetCut(cut func(point string, b *pgx.Batch)) { w.cut = cut }

// SetLost makes the Writer report each lost race, before it reads again.
func (w *Writer) SetLost(lost func(err error)) { w.lost = lost }
