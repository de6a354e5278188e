package auth

import "time"

// SetClock makes the store read its cache's ages from now.
func (s *Store) SetClock(now func() time.Time) { s.now = now }
