// Package targets holds the kinds of target deliveries are made to: a small
// registry in which each kind checks its own configuration and makes the
// Deliverer that carries out one attempt. A Deliverer reports an outcome;
// the worker applies the target's retry and receipt policies to it and
// records it, so no kind writes a state.
package targets
