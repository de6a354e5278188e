package alerts

import (
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/projection"
)

// Remembering is an Alerter with nothing but its remembered states, for
// the folds of Next.
func Remembering() *Alerter { return &Alerter{states: map[string]*projection.Message{}} }

// Next folds e on the remembered state of its stream; nils when it cannot.
func (a *Alerter) Next(e journal.Event) (before, after *projection.Message) { return a.next(e) }

// Remembers reports whether the alerter holds a state of stream.
func (a *Alerter) Remembers(stream string) bool { return a.states[stream] != nil }
