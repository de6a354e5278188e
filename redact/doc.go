// Package redact is the one place that decides what of the configuration
// a caller who may not administer is not shown, and masks it: the values
// of a target's headers, and of those its transform sets on a delivery,
// and the password of a target's URL (a bearer token or a basic password
// a receiver gave), and the passwords of a source's connection string. The REST API, the console and the event
// stream on NATS mask through it, in the definitions they show and in the
// journal's events that carry them. See docs/targets.md and
// docs/sources.md.
package redact
