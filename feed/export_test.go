package feed

// OnPoll makes c call f after every read of the journal, whether it found
// events or not; set it before Start.
func (c *Consumer) OnPoll(f func()) { c.polled = f }
