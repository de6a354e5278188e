package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
	"github.com/waybill/waybill/sources"
)

// inbox takes the rows an upstream system inserts into a table of another
// PostgreSQL database. It reads in ascending id above its frontier, the
// highest id it has taken, and stores each row as a message under the
// idempotency key row:<id>, recording in the same transaction that the
// row's processed marker is owed; after the commit it writes the marker.
// The watermark, kept in Waybill's database, rises only over an unbroken
// run of ids taken or passed: an id missing below a row that exists is a
// gap, checked again at every poll until its row appears (a late commit)
// or it has been missing for max_commit_delay, when it is journaled as a
// permanent hole and passed. Everything above the watermark may be read
// again after a restart; its rows are found stored already by their keys.
type inbox struct {
	name string
	// holder is the process in the source's lease: only it passes holes.
	holder     string
	cfg        sources.InboxConfig
	w          *commands.Writer
	db         *pgxpool.Pool
	now        func() time.Time
	log        *slog.Logger
	tracer     trace.Tracer
	maxPayload int64

	pool *pgxpool.Pool
	sql  *inboxSQL

	watermark, frontier int64
	gaps                gaps
	// sightings are, oldest first, when the highest id of the table was
	// seen above the frontier: the first one still above it dates the
	// oldest unread row.
	sightings []sighted
}

type sighted struct {
	id int64
	at time.Time
}

// maxSightings bounds inbox.sightings; the latest is replaced when full.
const maxSightings = 64

// markerBackoff is the wait after a marker's first failed write; it
// doubles with every failure up to maxMarkerBackoff.
const (
	markerBackoff    = time.Second
	maxMarkerBackoff = time.Hour
)

func newInbox(name, holder string, cfg sources.InboxConfig, w *commands.Writer, db *pgxpool.Pool, base service.Base, maxPayload int64) *inbox {
	return &inbox{name: name, holder: holder, cfg: cfg, w: w, db: db, now: base.Now, log: base.Logger.With("source", name),
		maxPayload: maxPayload, tracer: base.Tracer}
}

// resume starts over from the stored watermark: the gaps and the frontier
// this process knew may be stale.
func (p *inbox) resume(watermark int64) {
	p.watermark, p.frontier, p.gaps, p.sightings = watermark, watermark, nil, nil
}

func (p *inbox) close() {
	if p.pool != nil {
		p.pool.Close()
		p.pool = nil
	}
}

// inboxSQL are the statements on the inbox table, built once its columns
// are known.
type inboxSQL struct {
	read, late, max, mark string
}

// connect opens the pool on the inbox database and checks the table's
// columns, once; a failure is tried again at the next poll.
func (p *inbox) connect(ctx context.Context) error {
	if p.sql != nil {
		return nil
	}
	if p.pool == nil {
		cfg, err := pgxpool.ParseConfig(p.cfg.DatabaseURL)
		if err != nil {
			return errors.New("inbox database: config.database_url cannot be read")
		}
		cfg.MaxConns = 4
		cfg.ConnConfig.RuntimeParams["application_name"] = "waybill-inbox"
		if cfg.ConnConfig.ConnectTimeout == 0 {
			cfg.ConnConfig.ConnectTimeout = 10 * time.Second
		}
		if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return fmt.Errorf("inbox database: %w", err)
		}
	}
	table, _ := sources.TableIdentifier(p.cfg.Table)
	rows, err := p.pool.Query(ctx, `SELECT a.attname, t.typname, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, table.Sanitize())
	if err != nil {
		return fmt.Errorf("inbox database: %w", err)
	}
	types := map[string][2]string{}
	var name, typname, format string
	_, err = pgx.ForEachRow(rows, []any{&name, &typname, &format}, func() error {
		types[name] = [2]string{typname, format}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inbox database: %w", err)
	}
	if len(types) == 0 {
		return fmt.Errorf("inbox table %s does not exist, or its user may not see it", p.cfg.Table)
	}
	var errs []error
	for _, c := range []struct{ field, name string }{
		{"id_column", p.cfg.IDColumn}, {"payload_column", p.cfg.PayloadColumn}, {"from_column", p.cfg.FromColumn},
		{"to_column", p.cfg.ToColumn}, {"ordering_key_column", p.cfg.OrderingKeyColumn}, {"processed_column", p.cfg.ProcessedColumn},
	} {
		if _, ok := types[c.name]; c.name != "" && !ok {
			errs = append(errs, fmt.Errorf("config.%s: the inbox table has no column %q", c.field, c.name))
		}
	}
	if t := types[p.cfg.IDColumn][0]; t != "" && !slices.Contains([]string{"int2", "int4", "int8"}, t) {
		errs = append(errs, fmt.Errorf("config.id_column: %q is of type %s, not an integer", p.cfg.IDColumn, types[p.cfg.IDColumn][1]))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	t, id, pc := table.Sanitize(), ident(p.cfg.IDColumn), ident(p.cfg.ProcessedColumn)
	payload := ident(p.cfg.PayloadColumn)
	if types[p.cfg.PayloadColumn][0] != "bytea" {
		payload += "::text"
	}
	ordering := "NULL::text"
	if p.cfg.OrderingKeyColumn != "" {
		ordering = ident(p.cfg.OrderingKeyColumn) + "::text"
	}
	columns := id + "::bigint, " + payload + ", " + ident(p.cfg.PayloadColumn) + " IS NULL, " +
		ident(p.cfg.FromColumn) + "::text, " + ident(p.cfg.ToColumn) + "::text, " + ordering
	p.sql = &inboxSQL{
		read: "SELECT " + columns + " FROM " + t + " WHERE " + id + " > $1 ORDER BY " + id + " LIMIT $2",
		late: "SELECT " + columns + " FROM " + t + " JOIN unnest($1::bigint[], $2::bigint[]) AS waybill_gap(lo, hi) ON " +
			id + " BETWEEN waybill_gap.lo AND waybill_gap.hi ORDER BY " + id + " LIMIT $3",
		max: "SELECT coalesce(max(" + id + "), 0)::bigint FROM " + t,
		mark: "UPDATE " + t + " SET " + pc + " = $1::text::" + types[p.cfg.ProcessedColumn][1] +
			" WHERE " + id + " = ANY($2::bigint[]) AND (" + pc + " IS NULL OR " + pc + "::text = '')",
	}
	return nil
}

// row is one row of the inbox table as read.
type row struct {
	id       int64
	payload  []byte
	null     bool
	from, to pgtype.Text
	ordering pgtype.Text
}

func (p *inbox) read(ctx context.Context, sql string, args ...any) ([]row, error) {
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read inbox: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.payload, &x.null, &x.from, &x.to, &x.ordering)
	})
	if err != nil {
		return nil, fmt.Errorf("read inbox: %w", err)
	}
	return out, nil
}

// poll takes the late rows of the gaps, passes the gaps that are old
// enough, takes the rows above the frontier (a batch), writes the markers
// owed, raises the watermark and measures the backlog.
func (p *inbox) poll(ctx context.Context) (report, error) {
	rep := report{owed: -1}
	if err := p.connect(ctx); err != nil {
		return rep, err
	}
	now := p.now()
	lateDone, err := p.takeLate(ctx, &rep)
	if err != nil {
		return rep, err
	}
	if lateDone {
		if err := p.passHoles(ctx, now); err != nil {
			return rep, err
		}
	}
	rows, err := p.read(ctx, p.sql.read, p.frontier, p.cfg.Batch)
	if err != nil {
		return rep, err
	}
	taken, takeErr := p.take(ctx, rows, &rep)
	for _, r := range rows[:taken] {
		p.gaps.add(p.frontier+1, r.id-1, now)
		p.frontier = r.id
	}
	rep.more = takeErr == nil && len(rows) == p.cfg.Batch
	markErr := p.writeMarkers(ctx)
	if w := p.gaps.watermark(p.frontier); w > p.watermark {
		if err := sources.RaiseWatermark(ctx, p.db, p.name, w); err != nil {
			return rep, err
		}
		p.watermark = w
	}
	if err := p.measure(ctx, now, &rep); err != nil {
		return rep, err
	}
	return rep, errors.Join(takeErr, markErr)
}

// takeLate takes the rows that appeared in the gaps since they were seen,
// and reports whether every gap was searched whole, so that those still
// empty may be passed.
func (p *inbox) takeLate(ctx context.Context, rep *report) (bool, error) {
	if len(p.gaps) == 0 {
		return true, nil
	}
	from, to := p.gaps.bounds()
	rows, err := p.read(ctx, p.sql.late, from, to, p.cfg.Batch)
	if err != nil {
		return false, err
	}
	taken, err := p.take(ctx, rows, rep)
	for _, r := range rows[:taken] {
		p.gaps.take(r.id)
	}
	if taken > 0 {
		p.log.Info("late rows taken", "rows", taken)
	}
	return err == nil && len(rows) < p.cfg.Batch, err
}

// passHoles passes the gaps missing for max_commit_delay as permanent
// holes, each journaled with the watermark it lets rise.
func (p *inbox) passHoles(ctx context.Context, now time.Time) error {
	for i := 0; i < len(p.gaps); {
		g := p.gaps[i]
		if now.Sub(g.since) < p.cfg.MaxCommitDelay.D() {
			i++
			continue
		}
		rest := append(append(gaps(nil), p.gaps[:i]...), p.gaps[i+1:]...)
		w := rest.watermark(p.frontier)
		err := p.w.PassHole(ctx, journal.SourceHolePassed{Source: p.name, From: g.from, To: g.to,
			MissingSince: g.since, MaxCommitDelay: p.cfg.MaxCommitDelay}, w, p.holder)
		if err != nil {
			return err
		}
		p.log.Warn("ids passed as a permanent hole", "from", g.from, "to", g.to, "missing_since", g.since)
		p.gaps = rest
		p.watermark = max(p.watermark, w)
	}
	return nil
}

// take stores the rows as messages, in id order (IngestMany writes many
// in one transaction), and returns how many of the first rows were stored,
// or found stored already, without a failure before them: the frontier
// may pass those.
func (p *inbox) take(ctx context.Context, rows []row, rep *report) (int, error) {
	var (
		ins  []commands.NewMessage
		stop error
	)
	for _, r := range rows {
		in, err := p.message(r)
		if err != nil {
			stop = err
			break
		}
		ins = append(ins, in)
	}
	// Rows read again (after a restart, or beyond a gap) are stored
	// already: they are passed over at the cost of one read, not of a
	// transaction each that fails on its key. A row whose key a message
	// with other content holds is passed too, as a failure: it can never
	// be stored under its key, and waiting for it would stop the source
	// for good.
	keys := make([]string, len(ins))
	for i, in := range ins {
		keys[i] = in.IdempotencyKey
	}
	stored, err := projection.HeldKeys(ctx, p.db, p.name, keys)
	if err != nil {
		return 0, fmt.Errorf("read rows stored: %w", err)
	}
	var (
		fresh []commands.NewMessage
		index []int
	)
	for i, in := range ins {
		held, ok := stored[in.IdempotencyKey]
		if !ok {
			fresh, index = append(fresh, in), append(index, i)
		} else if err := commands.Conflict(in, held); err != nil {
			p.conflict(rows[i].id, err, rep)
		}
	}
	var spans []trace.Span // with tracing on, each message's ingest
	if p.tracer != nil {
		spans = make([]trace.Span, len(fresh))
		for k := range fresh {
			_, spans[k] = traceIngest(ctx, p.tracer, &fresh[k])
		}
	}
	for k, res := range p.w.IngestMany(ctx, fresh) {
		if spans != nil {
			endIngest(spans[k], res.Message, res.Created, res.Err)
		}
		switch {
		case errors.Is(res.Err, commands.ErrIdempotencyConflict):
			p.conflict(rows[index[k]].id, res.Err, rep)
		case res.Err != nil:
			return index[k], fmt.Errorf("row %d not stored: %w", rows[index[k]].id, res.Err)
		case res.Created:
			rep.taken++
		}
	}
	return len(ins), stop
}

// conflict counts a row passed because a message with other content holds
// its key: its marker is never written, and the source's state shows why.
func (p *inbox) conflict(id int64, err error, rep *report) {
	rep.failed++
	rep.problem = fmt.Sprintf("row %d passed, not stored: %v", id, err)
	p.log.Warn("row passed: its idempotency key is held by another message", "row", id, "err", err)
}

// message is the message of a row, with the ordering key of its
// ordering_key_column (none when NULL or empty). A row that cannot be one
// (a party missing or not a party, no payload, a payload too large, an
// ordering key too long) is an error
// that stops the source at it until the row is fixed: it is never passed.
func (p *inbox) message(r row) (commands.NewMessage, error) {
	var problems []string
	if r.null {
		problems = append(problems, "the payload is NULL")
	}
	if int64(len(r.payload)) > p.maxPayload {
		problems = append(problems, fmt.Sprintf("the payload is %d bytes, over the limit of %d", len(r.payload), p.maxPayload))
	}
	for _, party := range []struct {
		column string
		v      pgtype.Text
	}{{p.cfg.FromColumn, r.from}, {p.cfg.ToColumn, r.to}} {
		if !party.v.Valid {
			problems = append(problems, party.column+" is NULL")
		} else if err := lifecycle.CheckParty(party.column, party.v.String); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := lifecycle.CheckOrderingKey(p.cfg.OrderingKeyColumn, r.ordering.String); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return commands.NewMessage{}, fmt.Errorf("row %d cannot be taken: %s", r.id, strings.Join(problems, "; "))
	}
	return commands.NewMessage{Source: p.name, From: r.from.String, To: r.to.String, ContentType: p.cfg.ContentType,
		Type: p.cfg.Type, Headers: p.cfg.Headers, Payload: r.payload, IdempotencyKey: RowKey(r.id), OrderingKey: r.ordering.String,
		Row: &commands.InboxRow{Source: p.name, ID: r.id}}, nil
}

// RowKey is the idempotency key of an inbox row's message.
func RowKey(id int64) string { return sources.RowKeyPrefix + strconv.FormatInt(id, 10) }

// writeMarkers writes the processed markers owed that are due (or owed for
// force_marker_after, whatever their back-off), where the column is
// empty, and forgets them; a write that fails is tried again after a
// back-off.
func (p *inbox) writeMarkers(ctx context.Context) error {
	for {
		now := p.now()
		ids, err := sources.MarkersDue(ctx, p.db, p.name, now, now.Add(-p.cfg.ForceMarkerAfter.D()), p.cfg.Batch)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		value := p.cfg.ProcessedValue
		if value == "" {
			value = now.UTC().Format(time.RFC3339Nano)
		}
		if _, err := p.pool.Exec(ctx, p.sql.mark, value, ids); err != nil {
			berr := sources.MarkersFailed(ctx, p.db, p.name, ids, now, err.Error(), markerBackoff, maxMarkerBackoff)
			return errors.Join(fmt.Errorf("write markers: %w", err), berr)
		}
		if err := sources.ForgetMarkers(ctx, p.db, p.name, ids); err != nil {
			return err
		}
		if len(ids) < p.cfg.Batch {
			return nil
		}
	}
}

// measure reads the table's highest id and the markers owed: the rows
// behind the frontier, the oldest unread row's age and the markers are
// the report's backlog, lag and owed.
func (p *inbox) measure(ctx context.Context, now time.Time, rep *report) error {
	var top int64
	if err := p.pool.QueryRow(ctx, p.sql.max).Scan(&top); err != nil {
		return fmt.Errorf("measure inbox: %w", err)
	}
	owed, err := sources.MarkersOwed(ctx, p.db, p.name)
	if err != nil {
		return err
	}
	rep.owed = owed
	rep.backlog = max(top-p.frontier, 0)
	for len(p.sightings) > 0 && p.sightings[0].id <= p.frontier {
		p.sightings = p.sightings[1:]
	}
	if top > p.frontier && (len(p.sightings) == 0 || top > p.sightings[len(p.sightings)-1].id) {
		if len(p.sightings) == maxSightings {
			p.sightings = p.sightings[:maxSightings-1]
		}
		p.sightings = append(p.sightings, sighted{top, now})
	}
	if len(p.sightings) > 0 {
		rep.lag = now.Sub(p.sightings[0].at)
	}
	return nil
}
