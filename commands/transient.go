package commands

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/schema"
)

// Transient reports whether a command failed for a reason that can pass on
// its own: the database could not be reached, the connection was lost or
// did not answer in time, the server was restarting or out of
// connections, or a lost race outlasted the Writer's own tries. Trying the
// command again later may succeed. A refusal of the command itself (a
// *StateError, ErrInvalid, a constraint, a bad password or database name),
// a closed pool and a cancelled context are not transient.
//
// A command that failed this way may have committed all the same, when only
// the answer was lost: a worker's outcome and release are safe to try
// again, since the claim token lets only one of them through.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server answered: only these of its answers can pass.
		switch code := pgErr.Code; {
		case strings.HasPrefix(code, "08"): // connection exception
			return true
		case code == "57P01", code == "57P02", code == "57P03": // shutting down, crashed, starting up
			return true
		case code == "53300": // too many connections, as clients come back at once
			return true
		case code == "40001", code == "40P01": // lost races the Writer stopped retrying
			return true
		}
		return false
	}
	// No answer from the server: the network, the connection or the wait
	// for one failed. syscall.Errno is a net.Error too, so a refused or
	// reset connection counts whatever wraps it.
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// ProjectionsMoved reports whether a command was refused because the
// database's projections are no longer of this build's model
// (schema.CodeProjectionsMoved): an online rebuild of another build
// switched them. Nothing was written, and this process writes nothing
// more; a server of the other build can take the command.
func ProjectionsMoved(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == schema.CodeProjectionsMoved
}
