package commands

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/projection"
)

// SetCut makes the Writer queue statements at the named points of every
// command's batch: "projected" (after the projection writes) and "appended"
// (after the journal events, before the payload and the commit).
func (w *Writer) SetCut(cut func(point string, b *pgx.Batch)) { w.cut = cut }

// SetLost makes the Writer report each lost race, before it reads again.
func (w *Writer) SetLost(lost func(err error)) { w.lost = lost }

// SetBatched makes the Writer report the size of each batch it writes.
func (w *Writer) SetBatched(batched func(n int)) { w.batched = batched }

// Pending returns the number of commands waiting for a batch.
func (w *Writer) Pending() int {
	w.batches.mu.Lock()
	defer w.batches.mu.Unlock()
	return len(w.batches.pending)
}

// MaxLeaders is how many batches a Writer may have open at once.
const MaxLeaders = maxLeaders

// ClaimPlanSQL is the settings ClaimDue's choice of deliveries
// (projection.ClaimableChoiceSQL) runs under.
const ClaimPlanSQL = claimPlanSQL

// ClaimRescan is how long choices of due deliveries start at a cursor.
const ClaimRescan = claimRescan

// Written is the message as the Writer last wrote it, nil when it holds
// none.
func (w *Writer) Written(id uuid.UUID) *projection.Message {
	w.ownersMu.Lock()
	defer w.ownersMu.Unlock()
	return w.written[id]
}
