// Package intake runs the sources (package sources): the Runtime every
// process starts polls each enabled source while the process holds the
// source's lease in the database (source_state), so one process at a time
// takes from a source and a process that dies hands its sources over when
// their leases end. The directory poller takes the files dropped in a
// directory, the inbox poller the rows an upstream system writes into a
// table of another PostgreSQL database; both store each as a message under
// an idempotency key of its own, so a file or row taken twice after a
// crash makes one message. See docs/sources.md.
package intake
