package projection

import (
	"errors"
	"fmt"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// ErrPayloadExpunged is the cause of a refusal to send a message whose
// payload retention dropped: nothing is left to send.
var ErrPayloadExpunged = errors.New("payload expunged")

// sendsPayload lists the kinds that send, or will send, the message's
// payload to a target: the fold refuses them once it is expunged. A resend
// or replay (message.resent) makes a new generation to send, so it is one;
// a skip sends nothing and settles a delivery, so it is not.
var sendsPayload = map[journal.Kind]bool{
	journal.KindDeliveryClaimed:     true,
	journal.KindDeliveryRedelivered: true,
	journal.KindMessageRedispatched: true,
	journal.KindMessageResent:       true,
}

// checkPayloadHeld refuses an event of kind k that needs the payload of m
// when m's was expunged.
func checkPayloadHeld(m *Message, k journal.Kind) error {
	if !m.PayloadExpunged || !sendsPayload[k] {
		return nil
	}
	return &IllegalError{Kind: k, State: string(m.Status), Err: ErrPayloadExpunged,
		Reason: fmt.Sprintf("the payload was expunged by retention (%d bytes, sha256 %s): there is nothing left to send", m.PayloadSize, m.PayloadSHA256)}
}

// expunge folds message.payload_expunged into next: legal once, on a
// message whose status lets retention drop its payload
// (lifecycle.KeepsPayload), recording the message's own size and digest.
// The message's updated_at stays: the expunge does not move it.
func expunge(next *Message, e *journal.Event, p *journal.MessagePayloadExpunged) error {
	illegal := func(reason string) error {
		return &IllegalError{Kind: e.Kind(), State: string(next.Status), Reason: reason,
			Allowed: lifecycle.Strings(lifecycle.ExpungeStatuses())}
	}
	switch {
	case next.Version == 0:
		return illegal("the stream has no message")
	case lifecycle.KeepsPayload(next.Status):
		return illegal("the message keeps its payload while it is " + string(next.Status))
	case next.PayloadExpunged:
		return illegal("the payload was expunged already")
	case p.PayloadSize != next.PayloadSize || p.PayloadSHA256 != next.PayloadSHA256:
		return illegal(fmt.Sprintf("recorded %d bytes with sha256 %s, but the message has %d with %s",
			p.PayloadSize, p.PayloadSHA256, next.PayloadSize, next.PayloadSHA256))
	}
	next.PayloadExpunged = true
	return nil
}
