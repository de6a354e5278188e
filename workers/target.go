package workers

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
	"github.com/waybill/waybill/targets"
)

// DeliveryStore is the Store of one target's deliveries: the commands of
// the core, whose claims read the payload in their own transaction.
type DeliveryStore struct {
	w      *commands.Writer
	target lifecycle.Target
}

// NewDeliveryStore returns the store of the target's deliveries.
func NewDeliveryStore(w *commands.Writer, target lifecycle.Target) *DeliveryStore {
	return &DeliveryStore{w: w, target: target}
}

var _ Store[targets.Attempt] = (*DeliveryStore)(nil)

// Claim claims the delivery for one attempt with the target's lease. On a
// target with limits it claims the oldest due delivery instead, as many as
// the limits let through (one at most): the choice counts them, where a
// claim by id would be refused at its commit with the whole batch it went
// in; commands.ErrNotClaimable when the limits let none through.
func (s *DeliveryStore) Claim(ctx context.Context, id uuid.UUID) (Job[targets.Attempt], error) {
	if s.target.Limited() {
		jobs, err := s.ClaimDue(ctx, 1)
		if err != nil {
			return Job[targets.Attempt]{}, err
		}
		if len(jobs) == 0 {
			return Job[targets.Attempt]{}, commands.ErrNotClaimable
		}
		return jobs[0], nil
	}
	c, err := s.w.Claim(ctx, id, s.target.Lease())
	if err != nil {
		return Job[targets.Attempt]{}, err
	}
	return s.jobs([]commands.Claim{c})[0], nil
}

// ClaimDue claims up to n due deliveries of the target.
func (s *DeliveryStore) ClaimDue(ctx context.Context, n int) ([]Job[targets.Attempt], error) {
	claims, err := s.w.ClaimDue(ctx, s.target.Name, n, s.target.Lease())
	if err != nil || len(claims) == 0 {
		return nil, err
	}
	return s.jobs(claims), nil
}

// HeldUntil is when the target's health and rate let its deliveries be
// claimed again, as the Writer last read them; zero when they do now.
func (s *DeliveryStore) HeldUntil() time.Time { return s.w.HeldUntil(s.target.Name) }

// Complete records the outcome of the job's attempt and claims, with the
// target's lease, the next job as claim asks: the delivery the outcome
// lets go in its lane, or with NextDue on a target without lanes its
// oldest due delivery. On a target with limits and without lanes every
// outcome asks for NextDue: the slot it frees across the cluster is taken
// at once by the backlog its limits held, which no wake-up brings back.
// An outcome that disables the target tells the workers of every process
// through the Writer (Runtime.Start).
func (s *DeliveryStore) Complete(ctx context.Context, job Job[targets.Attempt], outcome lifecycle.Outcome, claim Next) (*Job[targets.Attempt], error) {
	if claim == NextFreed && s.target.Limited() && !s.target.Ordering.FIFO() {
		claim = NextDue
	}
	if claim == NextNone {
		_, err := s.w.Complete(ctx, job.ID, job.Token, outcome)
		return nil, err
	}
	_, next, err := s.w.CompleteAndClaimNext(ctx, job.ID, job.Token, outcome, s.target.Lease(), claim == NextDue)
	if err != nil || next == nil {
		return nil, err
	}
	return &s.jobs([]commands.Claim{*next})[0], nil
}

// Release gives the job's claim back.
func (s *DeliveryStore) Release(ctx context.Context, job Job[targets.Attempt], started bool, reason string) error {
	_, err := s.w.Release(ctx, job.ID, job.Token, started, reason)
	return err
}

// jobs makes the attempts of the claims, each with the payload its claim
// read.
func (s *DeliveryStore) jobs(claims []commands.Claim) []Job[targets.Attempt] {
	jobs := make([]Job[targets.Attempt], len(claims))
	for i, c := range claims {
		jobs[i] = Job[targets.Attempt]{ID: c.Delivery.ID, Token: c.Token, LeaseEnd: c.LeaseEnd,
			Work: attempt(c.Message, c.Delivery, c.Payload, c.Shape)}
	}
	return jobs
}

// attempt is the attempt of the claimed delivery d of m, sending payload
// as its target's transform shaped it, when it did (shape): every attempt
// sends what the transform made when the delivery was made, so a retry's
// body, idempotency key and signature are the first attempt's.
func attempt(m *projection.Message, d projection.Delivery, payload []byte, shape *routing.Shaped) targets.Attempt {
	since := d.CreatedAt
	if !d.RedeliveredAt.IsZero() {
		since = d.RedeliveredAt
	}
	a := targets.Attempt{
		MessageID: m.ID, DeliveryID: d.ID, Seq: d.Seq, Target: d.Target, Number: d.Attempts,
		Round: d.Attempts - d.RedeliveredAttempts, Redelivered: d.Redeliveries > 0, Since: since,
		Source: m.Source, From: m.From, To: m.To, ContentType: m.ContentType, Payload: payload, Trace: m.Trace,
		Headers: m.Headers,
	}
	switch {
	case shape == nil:
	case shape.Settled():
		a.NotSent = "not sent: " + d.Target + "'s transform settled the delivery when it was made (" +
			shape.Cancel + shape.Error + "); resend the message to run the transform in force now"
	default:
		a.Method, a.Path, a.SetHeaders = shape.Method, shape.Path, shape.Headers
		if shape.Shaped() {
			a.Payload, a.ContentType = shape.Body, shape.ContentType
		}
	}
	return a
}

// policyDeliverer applies a target's retry and receipt policies to what its
// kind's Deliverer reports, so every kind gets them alike.
type policyDeliverer struct {
	target lifecycle.Target
	kind   targets.Deliverer
	now    func() time.Time
}

// Deliver makes the attempt and turns its report into the outcome to record:
// a hand-over awaits its receipt when the target wants one, and a failure
// for now is retried by the policy or, past its bounds, fails for good.
// The outcome keeps the answer's status code.
func (p *policyDeliverer) Deliver(ctx context.Context, a targets.Attempt) lifecycle.Outcome {
	if a.NotSent != "" {
		return lifecycle.Failed(a.NotSent)
	}
	o := p.kind.Deliver(ctx, a)
	now := p.now()
	out := o
	switch o.Kind {
	case lifecycle.OutcomeDelivered:
		if r := p.target.Receipt; r != nil {
			out = lifecycle.AwaitingAck(o.Text, now.Add(r.Timeout.D()))
			out.ExternalID = o.ExternalID
		}
	case lifecycle.OutcomeRetry:
		at, stop := p.target.Retry.Next(a.Round, a.Since, now, o.RetryAt, rand.Float64()*2-1)
		if stop != "" {
			out = lifecycle.Failed(o.Text + "; " + stop)
		} else {
			out = lifecycle.Retry(at, o.Text)
		}
		if h := o.Hold; h != nil {
			// A receiver holds its target no longer than the policy
			// would wait for its Retry-After.
			until := h.Until
			if most := now.Add(p.target.Retry.MaxDelay.D()); until.After(most) {
				until = most
			}
			out.Hold = &lifecycle.Hold{Until: until, Status: h.Status}
		}
	}
	out.StatusCode = o.StatusCode
	return out
}
