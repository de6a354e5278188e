package workers

// Reserve holds a free slot, as a Taker's Reserve does.
func (w *Worker[T]) Reserve() bool { return w.reserve() }

// RunReserved attempts a job claimed for a slot Reserve held.
func (w *Worker[T]) RunReserved(job Job[T]) { w.runReserved(job) }

// GaveUp reports whether Stop has given up on the recordings still being
// tried.
func (w *Worker[T]) GaveUp() bool { return w.quit.Err() != nil }
