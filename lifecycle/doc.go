// Package lifecycle is the vocabulary every other package shares: the stages
// of a message, the states of a delivery, the status a user sees and the one
// rule that derives it, and the configuration (routes, targets, settings)
// that drives dispatch.
//
// It is a leaf: it imports nothing of Waybill, so the journal's event
// catalogue and the projection's fold can both speak it without a cycle.
package lifecycle
