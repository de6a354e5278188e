// Package commands holds the only writers of Waybill's state. Each command
// reads the state of its message, decides with the fold, appends the events
// and projects them in one transaction, and after the commit hands the
// wake-ups it made to a Notifier.
//
// Commands that arrive while earlier ones are being written share the next
// transaction (see batcher): it locks and reads their messages in one round
// trip, decides each command in turn and writes all the changes, with
// COMMIT, in a second. A batch locks its message rows in id order for the
// length of the transaction, so commands on one message wait for each other
// instead of racing; the message row is still updated only where it has the
// version read, and a stream version is unique in the journal, so a writer
// that skipped the lock fails and the batch reads again.
package commands
