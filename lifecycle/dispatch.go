package lifecycle

import (
	"fmt"
	"time"
)

// dispatchBackoff is the wait after each unclaimed wake-up: the first follows
// the dispatch itself, and the last repeats when MaxDispatches is raised.
var dispatchBackoff = []time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// DispatchBackoff is how long after its n-th unclaimed wake-up (n from 1) a
// delivery is due to be woken again. With the default of five wake-ups a
// delivery nobody claims is woken at 0 s, 10 s, 40 s, 2 min 40 s and
// 12 min 40 s, and stalls at 22 min 40 s.
func DispatchBackoff(n int) time.Duration {
	i := min(max(n, 1), len(dispatchBackoff)) - 1
	return dispatchBackoff[i]
}

// MaxSchedule is how far ahead a message may be scheduled. It is well
// under retention's shortest period for settled messages, so a schedule
// never outlives the records it is read against, and a scheduled message,
// being unsettled, is neither expunged nor removed while it waits.
const MaxSchedule = 30 * 24 * time.Hour

// Schedule is when a message ingested at now is first due: deliverAt, or
// now plus delay; zero for at once (neither given, or a time not after
// now). Both given, a negative delay, or a time more than MaxSchedule
// ahead is a *FieldError naming the field.
func Schedule(deliverAt time.Time, delay *Duration, now time.Time) (time.Time, error) {
	field := "deliver_at"
	at := deliverAt
	switch {
	case delay != nil && !deliverAt.IsZero():
		return time.Time{}, &FieldError{Field: "deliver_at", Problem: "and delay are alternatives: give one of them"}
	case delay != nil && *delay < 0:
		return time.Time{}, &FieldError{Field: "delay", Problem: fmt.Sprintf("must not be negative, got %s", *delay)}
	case delay != nil:
		field, at = "delay", now.Add(delay.D())
	}
	if at.Sub(now) > MaxSchedule {
		return time.Time{}, &FieldError{Field: field,
			Problem: fmt.Sprintf("must be at most %s ahead (30 days), got %s", Duration(MaxSchedule), at.Sub(now).Round(time.Second))}
	}
	if !at.After(now) {
		return time.Time{}, nil
	}
	return at, nil
}
