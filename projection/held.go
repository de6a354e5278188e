package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// claimHeldSQL finds a claim by its token among the claims held, on the
// deliveries_in_flight index, whose size is the attempts in flight.
var claimHeldSQL = `SELECT message_id, id FROM deliveries WHERE ` + lifecycle.LeaseExpiryRule.StatesSQL("") + ` AND claim_token = $1`

// HeldBy returns the message and the delivery that a claim with token
// holds (a delivery in delivering, its lease run out or not);
// ErrNotFound when none does.
func HeldBy(ctx context.Context, q journal.Querier, token uuid.UUID) (messageID, deliveryID uuid.UUID, err error) {
	rows, err := q.Query(ctx, claimHeldSQL, token)
	if err == nil {
		_, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (struct{}, error) {
			return struct{}{}, row.Scan(&messageID, &deliveryID)
		})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return uuid.Nil, uuid.Nil, fmt.Errorf("the delivery claim %s holds: %w", token, err)
	}
	return messageID, deliveryID, nil
}
