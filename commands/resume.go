package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// nextToken is the token of the claim that an outcome recorded with token
// makes in its transaction (CompleteAndClaimNext). Derived from token, it
// lets a try whose earlier try committed but lost its answer find the
// claim that try made (claimedNext), which only that try can have made.
func nextToken(token uuid.UUID) uuid.UUID { return uuid.NewSHA1(token, []byte("next")) }

// claimedNext returns the claim that an earlier try at the outcome
// recorded with token made in its transaction, while it still holds its
// delivery and its lease runs, as that try would have returned it; nil
// when there is none.
func (w *Writer) claimedNext(ctx context.Context, token uuid.UUID) (*Claim, error) {
	return w.claimHeld(ctx, nextToken(token))
}

// claimHeld returns the claim with token, made by a transaction whose
// answer was lost, while it still holds its delivery and its lease runs,
// as that transaction would have returned it; nil when there is none: the
// transaction did not commit, or the claim has moved on since.
func (w *Writer) claimHeld(ctx context.Context, token uuid.UUID) (*Claim, error) {
	messageID, deliveryID, err := projection.HeldBy(ctx, w.db, token)
	if errors.Is(err, projection.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	payloads := projection.QueuePayloads(b, []uuid.UUID{messageID})
	shapes := projection.QueueShapes(b, []uuid.UUID{messageID})
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read the payload of message %s: %w", messageID, err)
	}
	m, err := projection.Load(ctx, w.db, messageID)
	if err != nil {
		return nil, err
	}
	d := m.Delivery(deliveryID)
	if d == nil || d.State != lifecycle.StateDelivering || d.ClaimToken != token || !w.now().Before(d.LeaseEnd) {
		// Moved since, or about to be taken back: not this worker's.
		return nil, nil
	}
	// The Writer knows the claimed delivery's target, as if it had
	// written it, so the claim's own outcome may claim a due one next.
	w.learn(m)
	return &Claim{Token: token, Attempt: d.Attempts, LeaseEnd: d.LeaseEnd, Message: m, Delivery: *d,
		Payload: payloads[messageID], Shape: shapeOf(shapes, deliveryID)}, nil
}

// claimsHeld returns those of claims, made by a transaction that failed
// with err for a reason that can pass, that it committed all the same
// (claimHeld, committedAnyway).
func (w *Writer) claimsHeld(ctx context.Context, claims []Claim, err error) ([]Claim, error) {
	return committedAnyway(ctx, claims, err, func(ctx context.Context, c Claim) (*Claim, error) {
		return w.claimHeld(ctx, c.Token)
	})
}

// committedAnyway returns those of claims, made by a transaction that
// failed with err for a reason that can pass, that it committed all the
// same, its answer lost: held finds each one that still holds what it
// claimed, as the transaction would have returned it, or nil. It returns
// err when it found none. A claim it cannot look for waits out its lease,
// as it would have.
func committedAnyway[C any](ctx context.Context, claims []C, err error, held func(context.Context, C) (*C, error)) ([]C, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	var out []C
	for _, c := range claims {
		h, herr := held(ctx, c)
		if herr != nil {
			err = errors.Join(err, herr)
			break
		}
		if h != nil {
			out = append(out, *h)
		}
	}
	if len(out) == 0 {
		return nil, err
	}
	return out, nil
}
