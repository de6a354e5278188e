package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

// A receiver that answers 410 Gone disables its target in the transaction
// that records the outcome: the outcome's op reads the target's row, locked
// (goneRead), and the batch journals target.disabled on the config stream
// and writes the definition with enabled false, once, however many
// outcomes of the target say so at once. Claims are held to it: every
// transaction that writes claims takes its targets' locks (ClassTarget)
// shared (alone for a target with limits) and checks they are still
// enabled (targets_admit), and
// one that disables a target takes its lock alone before it writes
// anything. So no claim of a target is journaled after its target.disabled
// until an operator enables it again, whichever process claims.

// OnDisable makes f what the Writer calls once it has committed the
// disabling of a target by an outcome (a 410, or its health's
// disable_after), or found the claim of a 410 lost (its answer may have
// been lost after the commit), so that the workers of every process stop
// at once rather than at their next reading of the configuration; nil
// calls nothing. workers.Runtime gives its ConfigChanged from Start to
// Stop. f must not block.
func (w *Writer) OnDisable(f func()) {
	if f == nil {
		w.disabled.Store(nil)
		return
	}
	w.disabled.Store(&f)
}

// tellDisabled drops the cached configuration and calls OnDisable's f.
func (w *Writer) tellDisabled() {
	w.Invalidate()
	if f := w.disabled.Load(); f != nil {
		(*f)()
	}
}

// goneRead is what the op of an outcome lifecycle.Gone reads, under the
// lock of the target's row: its definition (none when the target is gone
// from the configuration) and the config stream's version.
type goneRead struct {
	target  string
	spec    []byte
	version int
}

// queue queues the reads, after the batch's messages are locked.
func (g *goneRead) queue(b *pgx.Batch) {
	g.spec = nil
	b.Queue(`SELECT spec FROM targets WHERE name = $1 FOR NO KEY UPDATE`, g.target).
		Query(func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, []any{&g.spec}, func() error { return nil })
			return err
		})
	journal.QueueStreamVersion(b, journal.ConfigStream, &g.version)
}

// disabling is what a batch has disabled so far: the targets, and the
// config stream's last version taken.
type disabling struct {
	targets []string
	version int
}

// off reports whether a claim of target is refused: the configuration
// the batch decides with has it disabled, or the batch disabled it.
func (s *disabling) off(cfg *configState, target string) bool {
	if t, ok := cfg.targets[target]; ok && !t.Enabled {
		return true
	}
	return slices.Contains(s.targets, target)
}

// disable records on c, the change of an outcome lifecycle.Gone of the
// delivery to g's target, that the target is disabled, unless it is so
// already: the event is returned for the batch's journal, on the config
// stream, and c writes the definition.
func (s *disabling) disable(c *change, g *goneRead, deliveryID uuid.UUID, now time.Time) (*journal.Event, error) {
	if g.spec == nil || slices.Contains(s.targets, g.target) {
		return nil, nil
	}
	var t lifecycle.Target
	if err := json.Unmarshal(g.spec, &t); err != nil {
		return nil, fmt.Errorf("read target %s: %w", g.target, err)
	}
	if !t.Enabled {
		return nil, nil
	}
	t.Enabled = false
	spec, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	s.version = max(s.version, g.version) + 1
	s.targets = append(s.targets, t.Name)
	c.also(func(b *pgx.Batch) {
		b.Queue(`UPDATE targets SET spec = $2, updated_at = $3 WHERE name = $1`, t.Name, spec, now)
	})
	return &journal.Event{RecordedAt: now, Stream: journal.ConfigStream, Version: s.version, Actor: journal.WorkerActor(t.Name),
		Payload: &journal.TargetDisabled{Target: t.Name, Reason: journal.DisabledGone, MessageID: c.after.ID,
			DeliveryID: deliveryID, StatusCode: http.StatusGone}}, nil
}

// claimLocks returns the targets whose claim locks a transaction that
// writes events takes, and which of them it takes alone: every target
// they disable, and those they claim for that cfg, the configuration they
// were decided with, gives limits. The rest it takes shared.
func claimLocks(events []journal.Event, cfg *configState) (names []string, alone []bool) {
	for _, e := range events {
		if p, ok := e.Payload.(*journal.TargetDisabled); ok {
			names, alone = append(names, p.Target), append(alone, true)
		}
	}
	claimed, _, _, _ := claimsOf(events)
	for _, t := range claimed {
		if !slices.Contains(names, t) {
			names, alone = append(names, t), append(alone, cfg.targets[t].Limited())
		}
	}
	return names, alone
}

// queueTargetLocks queues, first in a transaction that writes events,
// the locks of the targets they claim for and disable (claimLocks), in
// the order of their hash so that two transactions never wait for each
// other in a cycle: alone for a disabling and for a claim of a target
// with limits, so that targets_admit counts the attempts in flight and
// tokens the claims before it committed; shared for the other claims. A
// transaction that neither claims nor disables takes none. The
// statement reads no target: its snapshot is taken before it waits for
// a lock, so what it read could be older than a change committed by the
// holder it waited for. targets_admit reads the targets once the locks
// are held, and refuses a claim of a target that has limits under a
// lock held shared (the configuration was older than the limits).
func queueTargetLocks(b *pgx.Batch, events []journal.Event, cfg *configState) {
	names, alone := claimLocks(events, cfg)
	if len(names) == 0 {
		return
	}
	b.Queue(`SELECT CASE WHEN alone THEN pg_advisory_xact_lock($3::int, h) ELSE pg_advisory_xact_lock_shared($3::int, h) END
		FROM (SELECT hashtext(n) AS h, bool_or(alone) AS alone FROM unnest($1::text[], $2::bool[]) AS x(n, alone)
			GROUP BY 1 ORDER BY 1 OFFSET 0) l`, names, alone, int32(schema.ClassTarget))
}

// targetAdmitSQL calls targets_admit for the claims of a transaction
// only when one of their targets, as its row and its health's row read
// under the locks show, gives it anything to do: a target disabled, whose
// gate lets fewer claims through or that is half-open, one with a rate
// (its bucket pays for the claims), one with limits whose lock was taken
// shared, or whose max_concurrent these claims pass, its attempts in
// flight counted as the function counts them. An enabled target whose
// breaker is closed and whose limits let the claims through, the drain's
// common case, costs one plain statement and no call of the function,
// which, a PL/pgSQL call in the transaction that holds the target's lock
// alone, made every claim of the target wait longer. When it calls the
// function it gives the targets that were half-open, whose outcomes the
// Writer then counts at once (heldCounts).
var targetAdmitSQL = `SELECT targets_admit($1, $2, $3, $4, $5),
		ARRAY(SELECT g.target FROM target_health g WHERE g.target = ANY($1) AND g.breaker = 'half_open')
	FROM (SELECT) one WHERE EXISTS (
	SELECT FROM unnest($1::text[], $2::int[], $5::bool[]) AS x(name, n, alone)
		LEFT JOIN targets t ON t.name = x.name LEFT JOIN target_health g ON g.target = x.name
	WHERE t.spec->>'enabled' = 'false' OR g.breaker = 'half_open'
		OR ` + lifecycle.GateAllowanceSQL("g", "$3::timestamptz", "x.n") + ` < x.n
		OR (` + lifecycle.LimitedSQL("t.spec") + ` AND (NOT x.alone OR ` + lifecycle.RatedSQL("t.spec") + `
			OR ` + lifecycle.LimitsAllowanceSQL("t.spec", "("+schema.TargetInFlightSQL("x.name", "$3::timestamptz")+" - x.n)", "NULL::float8", "x.n") + ` < x.n)))`

// queueTargetAdmit queues, after the projection's writes of a
// transaction that claims, the check that the targets claimed for are
// still enabled, that their health lets as many claims through and that
// their limits do, the claims in flight counted (targets_admit, health.go),
// and that a target with limits had its lock alone (claimLocks); halfOpen
// is told the targets claimed for that were half-open.
func queueTargetAdmit(b *pgx.Batch, events []journal.Event, cfg *configState, halfOpen func([]string)) {
	claimed, counts, at, leaseEnds := claimsOf(events)
	if len(claimed) == 0 {
		return
	}
	names, lockedAlone := claimLocks(events, cfg)
	alone := make([]bool, len(claimed))
	for i, t := range claimed {
		alone[i] = lockedAlone[slices.Index(names, t)]
	}
	b.Queue(targetAdmitSQL, claimed, counts, at, leaseEnds, alone).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var names []string
			if err := rows.Scan(nil, &names); err != nil {
				return err
			}
			halfOpen(names)
		}
		return rows.Err()
	})
}

// claimsOf returns the targets events claim for, with the number of
// claims of each, the time of the last claim and the latest end of each
// target's claims' leases.
func claimsOf(events []journal.Event) (claimed []string, counts []int32, at time.Time, leaseEnds []time.Time) {
	for _, e := range events {
		p, ok := e.Payload.(*journal.DeliveryClaimed)
		if !ok {
			continue
		}
		i := slices.Index(claimed, e.Target)
		if i < 0 {
			claimed, counts, leaseEnds, i = append(claimed, e.Target), append(counts, 0), append(leaseEnds, time.Time{}), len(claimed)
		}
		counts[i]++
		at = e.RecordedAt
		if p.LeaseEnd.After(leaseEnds[i]) {
			leaseEnds[i] = p.LeaseEnd
		}
	}
	return claimed, counts, at, leaseEnds
}

// targetDisabled reports the refusal of targets_admit: a target
// claimed for was disabled, or given limits, after the configuration was
// read.
func targetDisabled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == schema.CodeTargetDisabled
}

// claimsOff returns the target of a claim c records whose target is off,
// or "".
func claimsOff(c *change, off func(string) bool) string {
	for _, e := range c.events {
		if _, ok := e.Payload.(*journal.DeliveryClaimed); ok && off(e.Target) {
			return e.Target
		}
	}
	return ""
}
