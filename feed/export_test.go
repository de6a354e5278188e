package feed

// OnPoll makes c call f after every read of the journal, whether it found
// events or not; set it before Start.
func (c *Consumer) OnPoll(f func()) { c.polled = f }

// LagSQL and LagPlan are the lag's query and the settings it runs under.
const LagSQL, LagPlan = lagSQL, lagPlan
