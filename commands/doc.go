// Package commands holds the only writers of Waybill's state. Each command is
// one transaction: read the state, decide with the fold, append the events,
// project them, commit; and then, after the commit, hand the wake-ups it
// made to a Notifier.
//
// A command's writes go to PostgreSQL as one pipelined batch, which the
// server runs as one implicit transaction: a command costs a read and a
// write round trip. The message row is updated only where it still has the
// version the command read, and a stream version is unique in the journal,
// so of two commands racing on one message one commits and the other reads
// again and decides anew.
package commands
