package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
	"github.com/waybill/waybill/sources"
)

// Sources returns every source, by name.
func (w *Writer) Sources(ctx context.Context) ([]lifecycle.Source, error) {
	c, err := w.loadConfig(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.Source, 0, len(c.sources))
	for _, s := range c.sources {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b lifecycle.Source) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Source returns the source of the name, and whether there is one, from
// the configuration dispatch decides with (cached as the routes are), so
// an ingest can ask at no cost.
func (w *Writer) Source(ctx context.Context, name string) (lifecycle.Source, bool, error) {
	c, err := w.config(ctx)
	if err != nil {
		return lifecycle.Source{}, false, err
	}
	s, ok := c.sources[name]
	return s, ok, nil
}

// CreateSource adds a source, with its kind's defaults filled in;
// ErrExists when the name is taken.
func (w *Writer) CreateSource(ctx context.Context, s lifecycle.Source, actor string) (lifecycle.Source, error) {
	s, err := w.changeSource(ctx, s, actor, true)
	if err != nil {
		return s, fmt.Errorf("create source %s: %w", s.Name, err)
	}
	return s, nil
}

// UpdateSource replaces a source's definition; ErrNotFound when it has
// none. The source's progress (an inbox's watermark, the markers owed)
// stays: to start over, delete the source and create it again.
func (w *Writer) UpdateSource(ctx context.Context, s lifecycle.Source, actor string) (lifecycle.Source, error) {
	s, err := w.changeSource(ctx, s, actor, false)
	if err != nil {
		return s, fmt.Errorf("update source %s: %w", s.Name, err)
	}
	return s, nil
}

func (w *Writer) changeSource(ctx context.Context, s lifecycle.Source, actor string, create bool) (lifecycle.Source, error) {
	s, err := sources.Prepare(s)
	if err != nil {
		return s, invalid(err)
	}
	spec, err := json.Marshal(s)
	if err != nil {
		return s, err
	}
	return s, w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		_, exists := c.sources[s.Name]
		switch {
		case create && exists:
			return nil, nil, &ExistsError{Kind: "source", Field: "name", Value: s.Name}
		case create:
			return []journal.Payload{&journal.SourceCreated{Source: s}}, func(b *pgx.Batch) {
				b.Queue(`INSERT INTO sources (name, spec, created_at, updated_at) VALUES ($1, $2, $3, $3)`, s.Name, spec, now)
				sources.QueueCreateState(b, s.Name)
			}, nil
		case !exists:
			return nil, nil, ErrNotFound
		}
		return []journal.Payload{&journal.SourceUpdated{Source: s}}, func(b *pgx.Batch) {
			b.Queue(`UPDATE sources SET spec = $2, updated_at = $3 WHERE name = $1`, s.Name, spec, now)
		}, nil
	})
}

// DeleteSource removes a source with its progress: its lease, its
// watermark and the markers it still owed, which are never written.
func (w *Writer) DeleteSource(ctx context.Context, name, actor string) error {
	err := w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		if _, ok := c.sources[name]; !ok {
			return nil, nil, ErrNotFound
		}
		return []journal.Payload{&journal.SourceDeleted{Name: name}}, func(b *pgx.Batch) {
			b.Queue(`DELETE FROM sources WHERE name = $1`, name)
			sources.QueueDeleteState(b, name)
		}, nil
	})
	if err != nil {
		return fmt.Errorf("delete source %s: %w", name, err)
	}
	return nil
}

// PassHole journals that an inbox_table source passes the ids from to to as
// a permanent hole, and in the same transaction moves its watermark on to
// watermark, which the caller computed with the hole passed (a watermark
// only rises). Only holder, the process holding the source's lease, may:
// one whose lease another took may have taken a row of the hole, and
// PassHole then returns ErrSourceNotHeld. A source that no longer exists
// is ErrNotFound.
func (w *Writer) PassHole(ctx context.Context, hole journal.SourceHolePassed, watermark int64, holder string) error {
	if err := hole.Validate(); err != nil {
		return invalid(err)
	}
	err := w.changeConfig(ctx, journal.SourceActor(hole.Source), func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		if _, ok := c.sources[hole.Source]; !ok {
			return nil, nil, ErrNotFound
		}
		return []journal.Payload{&hole}, func(b *pgx.Batch) {
			sources.QueuePassHole(b, hole.Source, holder, watermark)
		}, nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == schema.CodeSourceNotHeld {
		err = fmt.Errorf("%w: %s", ErrSourceNotHeld, pgErr.Message)
	}
	if err != nil {
		return fmt.Errorf("pass hole %d-%d of source %s: %w", hole.From, hole.To, hole.Source, err)
	}
	return nil
}

// ErrSourceNotHeld is PassHole's refusal of a process that no longer holds
// the source's lease.
var ErrSourceNotHeld = errors.New("the source is not held by this process")
