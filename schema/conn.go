package schema

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// AfterConnect prepares a new connection of a pool for Waybill's queries
// (set it as pgxpool.Config.AfterConnect): a uuid.UUID argument is sent as
// the 16 bytes of a binary uuid. Without it pgx sends it through its
// driver.Valuer, as text it formats and then parses back.
func AfterConnect(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{wrapUUID}, m.TryWrapEncodePlanFuncs...)
	return nil
}

func wrapUUID(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if id, ok := value.(uuid.UUID); ok {
		return &uuidPlan{}, pgtype.UUID{Bytes: id, Valid: true}, true
	}
	return nil, nil, false
}

// uuidPlan encodes a uuid.UUID with the plan of pgtype.UUID.
type uuidPlan struct{ next pgtype.EncodePlan }

func (p *uuidPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidPlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}
