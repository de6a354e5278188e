// Package bulk runs the bulk operations (commands.CreateOperation) in the
// background of a server: one process at a time, the one holding the
// runner's advisory lock, takes the running operations' messages in
// batches, paced by the setting operations.rate, each batch one
// transaction of commands.Writer.Operate. What has been taken is in each
// operation's journal stream, written with the actions themselves, so a
// runner that stops anywhere (a kill, a restart, the database away)
// leaves nothing half done and the next one goes on from there.
package bulk
