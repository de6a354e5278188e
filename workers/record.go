package workers

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/waybill/waybill/commands"
)

// A recording that failed for a reason that can pass (commands.Transient:
// the database away, a connection lost) is tried again after a wait that
// starts at recordBackoff and doubles up to maxRecordBackoff, each cut by
// a random part of up to half so that the recordings held up by one outage
// do not all come back at once.
const (
	recordBackoff    = 100 * time.Millisecond
	maxRecordBackoff = 2 * time.Second
)

// record runs write, the recording of a job's outcome or release, until it
// succeeds, fails for good, the job's lease ends, or Stop gives up on it.
// A try that failed may have committed all the same; trying again is safe
// because every try is conditional on the claim token: a late one can
// never overwrite a newer claim, and commands.ErrClaimLost ends the tries.
// Past the lease another worker may claim the job, so the tries stop
// there and the lease brings the job back, as when the process dies.
//
// The job keeps its slot meanwhile. A target whose recordings fail cannot
// record any other attempt either, and its claims fail alike, so freeing
// the slot would only start attempts whose outcomes would wait too.
//
// It logs what became of the recording, with the job's delivery id and
// attrs, and returns the last error. The logger is built only to log: a
// recording that succeeds at once, nearly every one, costs no formatting.
func (w *Worker[T]) record(job Job[T], what string, write func(context.Context) error, attrs ...any) error {
	log := func() *slog.Logger { return w.log.With(append([]any{"delivery_id", job.ID}, attrs...)...) }
	wait := recordBackoff
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		// Stop ends the tries going on when it gives up; a recording that
		// begins after that (the release of a job an ingest claimed for a
		// slot, committed late) still gets its one try.
		stop := func() bool { return false }
		if w.quit.Err() == nil {
			stop = context.AfterFunc(w.quit, cancel)
		}
		err := write(ctx)
		stop()
		cancel()
		switch {
		case err == nil:
			if tries > 1 {
				log().Info(what+" recorded", "tries", tries)
			}
			return nil
		case errors.Is(err, commands.ErrClaimLost):
			// After a try that failed, the claim may be "lost" to that
			// try itself, whose commit only the answer missed.
			log().Warn(what+" not recorded: claim lost", "tries", tries)
			return err
		case w.quit.Err() == nil && !commands.Transient(err):
			log().Error(what+" not recorded", "err", err)
			return err
		}
		if w.leased(job) {
			if tries == 1 {
				log().Warn(what+" not recorded yet; trying again until the lease ends", "lease_end", job.LeaseEnd, "err", err)
			}
			timer := time.NewTimer(wait/2 + rand.N(wait/2+1))
			select {
			case <-timer.C:
			case <-w.quit.Done():
				timer.Stop()
			}
			wait = min(2*wait, maxRecordBackoff)
		}
		if !w.leased(job) {
			log().Error(what+" not recorded; the lease will bring the job back", "tries", tries, "lease_end", job.LeaseEnd, "err", err)
			return err
		}
	}
}

// leased reports whether a recording of the job may still be tried: its
// lease runs and Stop has not given up on it.
func (w *Worker[T]) leased(job Job[T]) bool {
	return w.quit.Err() == nil && w.cfg.Now().Before(job.LeaseEnd)
}
