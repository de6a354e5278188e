package lifecycle

import (
	"strings"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	d := func(v time.Duration) *Duration { x := Duration(v); return &x }
	tests := []struct {
		name      string
		deliverAt time.Time
		delay     *Duration
		want      time.Time
		err       string
	}{
		{"neither", time.Time{}, nil, time.Time{}, ""},
		{"deliver_at ahead", now.Add(time.Hour), nil, now.Add(time.Hour), ""},
		{"deliver_at in the past is now", now.Add(-time.Hour), nil, time.Time{}, ""},
		{"deliver_at now is now", now, nil, time.Time{}, ""},
		{"deliver_at at the bound", now.Add(MaxSchedule), nil, now.Add(MaxSchedule), ""},
		{"deliver_at past the bound", now.Add(MaxSchedule + time.Second), nil, time.Time{}, "deliver_at: must be at most 720h0m0s ahead"},
		{"delay", time.Time{}, d(90 * time.Second), now.Add(90 * time.Second), ""},
		{"zero delay is now", time.Time{}, d(0), time.Time{}, ""},
		{"negative delay", time.Time{}, d(-time.Second), time.Time{}, "delay: must not be negative"},
		{"delay past the bound", time.Time{}, d(MaxSchedule + time.Hour), time.Time{}, "delay: must be at most"},
		{"both", now.Add(time.Hour), d(time.Hour), time.Time{}, "deliver_at: and delay are alternatives"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Schedule(tt.deliverAt, tt.delay, now)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Schedule = %v, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || !got.Equal(tt.want) {
				t.Fatalf("Schedule = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
