package projection

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/journal"
)

// snapshot is read-only repeatable-read transactions on distinct
// connections that all see one state of the database: the first exported
// its snapshot and the others imported it.
type snapshot struct {
	conns []*pgxpool.Conn
	txs   []pgx.Tx
}

// openSnapshot begins up to n such transactions on connections of db, fewer
// when the pool has fewer free (never less than one), so it does not wait
// for connections its caller holds.
func openSnapshot(ctx context.Context, db *pgxpool.Pool, n int) (_ *snapshot, err error) {
	st := db.Stat()
	n = max(1, min(n, int(st.MaxConns()-st.AcquiredConns())))
	s := &snapshot{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	var id string
	for i := range n {
		conn, err := db.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("open snapshot: %w", err)
		}
		s.conns = append(s.conns, conn)
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return nil, fmt.Errorf("open snapshot: %w", err)
		}
		s.txs = append(s.txs, tx)
		if i == 0 {
			if n == 1 {
				break
			}
			err = tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&id)
		} else {
			// SET takes no parameters; the id is hex digits and dashes.
			_, err = tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+strings.ReplaceAll(id, "'", "''")+`'`)
		}
		if err != nil {
			return nil, fmt.Errorf("open snapshot: %w", err)
		}
	}
	return s, nil
}

func (s *snapshot) queriers() []journal.Querier {
	qs := make([]journal.Querier, len(s.txs))
	for i, tx := range s.txs {
		qs[i] = tx
	}
	return qs
}

// close ends the transactions, which changed nothing, and gives the
// connections back.
func (s *snapshot) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tx := range s.txs {
		_ = tx.Rollback(ctx)
	}
	for _, c := range s.conns {
		c.Release()
	}
	s.txs, s.conns = nil, nil
}
