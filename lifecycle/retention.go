package lifecycle

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Retention says how long settled messages keep their payload and stay in
// the live tables; see docs/retention.md. A nil period is never, so the
// zero Retention keeps everything.
type Retention struct {
	// PayloadAfter is how long after it settled a message that is not
	// faulted keeps its payload bytes.
	PayloadAfter *Duration `json:"payload_after"`
	// SettledAfter is how long after it settled a message that is not
	// faulted stays in the live tables and the journal.
	SettledAfter *Duration `json:"settled_after"`
	// FailedAfter is the same for a faulted message; never shorter than
	// SettledAfter.
	FailedAfter *Duration `json:"failed_after"`
	// ArchiveDir is where the events of removed messages are written
	// before they leave the journal; required with SettledAfter.
	ArchiveDir string `json:"archive_dir"`
}

// The bounds of Retention.
const (
	MinRetentionPeriod = time.Second
	MaxArchiveDirLen   = 1024
)

// Validate checks every field and returns all problems joined.
func (r Retention) Validate() error {
	var errs []error
	for _, p := range []struct {
		name string
		d    *Duration
	}{{"payload_after", r.PayloadAfter}, {"settled_after", r.SettledAfter}, {"failed_after", r.FailedAfter}} {
		if p.d != nil && p.d.D() < MinRetentionPeriod {
			errs = append(errs, &FieldError{Field: "retention." + p.name,
				Problem: fmt.Sprintf("must be %s or more, or null for never; got %s", MinRetentionPeriod, p.d)})
		}
	}
	switch {
	case r.FailedAfter != nil && r.SettledAfter == nil:
		errs = append(errs, &FieldError{Field: "retention.failed_after",
			Problem: "must be null while retention.settled_after is null: a failed message is kept at least as long as a settled one"})
	case r.FailedAfter != nil && *r.FailedAfter < *r.SettledAfter:
		errs = append(errs, &FieldError{Field: "retention.failed_after",
			Problem: fmt.Sprintf("must not be shorter than retention.settled_after (%s)", r.SettledAfter)})
	}
	switch dir := r.ArchiveDir; {
	case dir == "" && r.SettledAfter != nil:
		errs = append(errs, &FieldError{Field: "retention.archive_dir",
			Problem: "is required while retention.settled_after is set: events are archived before they leave the journal"})
	case dir == "":
	case len(dir) > MaxArchiveDirLen || strings.ContainsFunc(dir, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		errs = append(errs, &FieldError{Field: "retention.archive_dir",
			Problem: fmt.Sprintf("must be a path of at most %d bytes without control characters", MaxArchiveDirLen)})
	case !filepath.IsAbs(dir):
		errs = append(errs, &FieldError{Field: "retention.archive_dir", Problem: fmt.Sprintf("%q must be an absolute path", dir)})
	}
	return errors.Join(errs...)
}

// Enabled reports whether any period is set.
func (r Retention) Enabled() bool {
	return r.PayloadAfter != nil || r.SettledAfter != nil || r.FailedAfter != nil
}

// Equal reports whether r and o are the same settings: the same periods,
// each set or not, and the same archive_dir.
func (r Retention) Equal(o Retention) bool {
	same := func(a, b *Duration) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
	return same(r.PayloadAfter, o.PayloadAfter) && same(r.SettledAfter, o.SettledAfter) &&
		same(r.FailedAfter, o.FailedAfter) && r.ArchiveDir == o.ArchiveDir
}

// Shortest is the shortest period set, 0 when none is.
func (r Retention) Shortest() time.Duration {
	var out time.Duration
	for _, d := range []*Duration{r.PayloadAfter, r.SettledAfter, r.FailedAfter} {
		if d != nil && (out == 0 || d.D() < out) {
			out = d.D()
		}
	}
	return out
}

// KeepsPayload reports whether a message of the status keeps its payload
// whatever payload_after says: an unsettled one, which may still be
// delivered, and a faulted one, which an operator may send again. It loses
// it only when it is removed.
func KeepsPayload(s MessageStatus) bool { return !s.Settled() || s.Faulted() }

// ExpungeStatuses are the statuses in which payload_after applies.
func ExpungeStatuses() []MessageStatus {
	return StatusesWhere(func(s MessageStatus) bool { return !KeepsPayload(s) })
}

// SettledStatuses are the statuses in which a message may be removed:
// after settled_after, or after failed_after for the faulted ones.
func SettledStatuses() []MessageStatus { return StatusesWhere(MessageStatus.Settled) }

// PayloadDue reports whether a message of the status whose last transition
// was at settled loses its payload at now.
func (r Retention) PayloadDue(s MessageStatus, settled, now time.Time) bool {
	return r.PayloadAfter != nil && !KeepsPayload(s) && !now.Before(settled.Add(r.PayloadAfter.D()))
}

// RemovalAfter is the period after which a message of the status leaves
// the live tables; false when it never does.
func (r Retention) RemovalAfter(s MessageStatus) (time.Duration, bool) {
	d := r.SettledAfter
	if s.Faulted() {
		d = r.FailedAfter
	}
	if !s.Settled() || d == nil {
		return 0, false
	}
	return d.D(), true
}

// RemovalDue reports whether a message of the status whose last transition
// was at settled leaves the live tables at now.
func (r Retention) RemovalDue(s MessageStatus, settled, now time.Time) bool {
	after, ok := r.RemovalAfter(s)
	return ok && !now.Before(settled.Add(after))
}

// String is the retention in words, for logs and history pages.
func (r Retention) String() string {
	if !r.Enabled() {
		return "keep everything"
	}
	period := func(d *Duration) string {
		if d == nil {
			return "never"
		}
		return d.String()
	}
	s := fmt.Sprintf("payload after %s, settled after %s, failed after %s", period(r.PayloadAfter),
		period(r.SettledAfter), period(r.FailedAfter))
	if r.ArchiveDir != "" {
		s += ", archived in " + r.ArchiveDir
	}
	return s
}
