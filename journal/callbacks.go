package journal

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/lifecycle"
)

// MaxCallbackURLLength bounds a message's callback URL.
const MaxCallbackURLLength = 2048

// checkCallbackURL accepts no URL, or an absolute http or https one.
func checkCallbackURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(s) > MaxCallbackURLLength {
		return field("callback_url", fmt.Sprintf("must be an absolute http:// or https:// URL of at most %d bytes", MaxCallbackURLLength))
	}
	return nil
}

// The events of a message's outcome callback. Each names the settlement
// it calls back for (Seq, from 1): the fold makes a callback queued each
// time a message with a callback URL settles (see projection.Apply), and
// these events carry it through its calls as the delivery events carry a
// delivery through its attempts.

// CallbackClaimed: the callback worker took the callback for one call,
// under a lease.
type CallbackClaimed struct {
	Seq      int       `json:"seq"`
	Token    uuid.UUID `json:"token"`
	Attempt  int       `json:"attempt"`
	LeaseEnd time.Time `json:"lease_end"`
}

func (*CallbackClaimed) Kind() Kind { return KindCallbackClaimed }
func (p *CallbackClaimed) Text() string {
	return fmt.Sprintf("callback %d: call %d claimed; lease until %s", p.Seq, p.Attempt, stamp(p.LeaseEnd))
}
func (p *CallbackClaimed) Validate() error {
	return errors.Join(positive("seq", p.Seq), required("token", p.Token != uuid.Nil), positive("attempt", p.Attempt),
		required("lease_end", !p.LeaseEnd.IsZero()))
}

// CallbackAttempted: the claimed call ended with an outcome: delivered,
// retry or failed.
type CallbackAttempted struct {
	Seq     int               `json:"seq"`
	Token   uuid.UUID         `json:"token"`
	Attempt int               `json:"attempt"`
	Outcome lifecycle.Outcome `json:"outcome"`
}

func (*CallbackAttempted) Kind() Kind { return KindCallbackAttempted }
func (p *CallbackAttempted) Text() string {
	o := p.Outcome
	s := fmt.Sprintf("callback %d: call %d: %s", p.Seq, p.Attempt, o.Kind)
	if o.Kind == lifecycle.OutcomeRetry {
		s += " at " + stamp(o.RetryAt)
	}
	return withDetail(s, o.Text)
}
func (p *CallbackAttempted) Validate() error {
	var kind error
	if p.Outcome.Kind == lifecycle.OutcomeAwaitingAck {
		kind = field("outcome.kind", "a callback awaits no receipt: allowed are delivered, retry, failed")
	}
	return errors.Join(positive("seq", p.Seq), required("token", p.Token != uuid.Nil), positive("attempt", p.Attempt),
		kind, p.Outcome.Validate())
}

// CallbackReleased: a stopping worker gave its claim of the callback back.
type CallbackReleased struct {
	Seq   int       `json:"seq"`
	Token uuid.UUID `json:"token"`
	// Started says the call had begun: the receiver may have it already.
	Started bool   `json:"started"`
	Reason  string `json:"reason"`
}

func (*CallbackReleased) Kind() Kind { return KindCallbackReleased }
func (p *CallbackReleased) Text() string {
	return fmt.Sprintf("callback %d: released: %s", p.Seq, p.Reason)
}
func (p *CallbackReleased) Validate() error {
	return errors.Join(positive("seq", p.Seq), required("token", p.Token != uuid.Nil), required("reason", p.Reason != ""))
}

// CallbackLeaseExpired: a call's lease ran out before its outcome was
// recorded; the worker is presumed dead.
type CallbackLeaseExpired struct {
	Seq      int       `json:"seq"`
	Token    uuid.UUID `json:"token"`
	LeaseEnd time.Time `json:"lease_end"`
}

func (*CallbackLeaseExpired) Kind() Kind { return KindCallbackLeaseExpired }
func (p *CallbackLeaseExpired) Text() string {
	return fmt.Sprintf("callback %d: call interrupted: lease expired at %s", p.Seq, stamp(p.LeaseEnd))
}
func (p *CallbackLeaseExpired) Validate() error {
	return errors.Join(positive("seq", p.Seq), required("token", p.Token != uuid.Nil), required("lease_end", !p.LeaseEnd.IsZero()))
}
