// Package workers makes deliveries move. Committed commands hand their
// wake-ups to a Publisher, which puts each on NATS under the subject of its
// target; a Worker per target subscribes to that subject, claims the
// delivery a wake-up names with a lease, makes the attempt through the
// target's Deliverer and records the outcome. A wake-up is only a hint: a
// lost one costs time, never a delivery, since the sweep wakes every due
// delivery again and a worker's catch-up claims whatever is due. A retry
// is claimed when it comes due by the worker that recorded it, whose timer
// asks for a catch-up then; the sweep wakes it only when that worker is
// gone (lifecycle.SweepWakeRule).
//
// Worker is generic over its jobs (a Store keeps them, a Deliverer attempts
// one), so jobs other than a target's deliveries can reuse it. Runtime runs
// one Worker per enabled target of the configuration.
package workers
