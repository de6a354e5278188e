// Package projection is the fold of the journal into the state of messages
// and their deliveries, and the projector that stores that state in the
// messages and deliveries tables.
//
// Apply is the one transition function: the commands, the audit and the
// rebuild all use it, and nothing else decides what an event does. It is
// pure: it reads the event's recorded time, never a clock.
package projection
