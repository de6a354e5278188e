package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/routing"
	"github.com/waybill/waybill/targets"
)

// configState is the whole configuration at one version of its stream.
type configState struct {
	version int
	routes  []lifecycle.Route
	// table is the routes with their filters compiled.
	table *routing.Table
	// transforms are the targets' transforms compiled, and maxPayload
	// bounds a payload one makes (Config.MaxPayload).
	transforms routing.Transforms
	maxPayload int64
	targets    map[string]lifecycle.Target
	sources    map[string]lifecycle.Source
	settings   lifecycle.Settings
	loaded     time.Time
	own        ownKeys
}

// config returns the configuration dispatch decides with: cached, reloaded
// after a change through this Writer, after Invalidate, and at the latest
// ConfigTTL after it was read.
func (w *Writer) config(ctx context.Context) (*configState, error) {
	w.mu.Lock()
	c, seen := w.cached, w.invalidated
	w.mu.Unlock()
	if c != nil && w.clock().Sub(c.loaded) < w.ttl {
		return c, nil
	}
	c, err := w.loadConfig(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	if w.invalidated == seen {
		w.cached = c
	}
	w.mu.Unlock()
	return c, nil
}

// Invalidate drops the cached configuration, so the next dispatch reads it
// again; call it when another process reports a change.
func (w *Writer) Invalidate() {
	w.mu.Lock()
	w.cached = nil
	w.invalidated++
	w.mu.Unlock()
}

func (w *Writer) loadConfig(ctx context.Context) (*configState, error) {
	c := &configState{targets: map[string]lifecycle.Target{}, sources: map[string]lifecycle.Source{}, loaded: w.clock(),
		maxPayload: w.maxPayload}
	b := &pgx.Batch{}
	journal.QueueStreamVersion(b, journal.ConfigStream, &c.version)
	b.Queue(`SELECT id, source, from_pattern, to_pattern, target, types, filter FROM routes ORDER BY created_at, id`).
		Query(func(rows pgx.Rows) error {
			var err error
			c.routes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (lifecycle.Route, error) {
				var r lifecycle.Route
				err := row.Scan(&r.ID, &r.Source, &r.From, &r.To, &r.Target, &r.Types, &r.Filter)
				if len(r.Types) == 0 {
					r.Types = nil
				}
				return r, err
			})
			return err
		})
	b.Queue(`SELECT spec FROM targets`).Query(func(rows pgx.Rows) error {
		var raw []byte
		_, err := pgx.ForEachRow(rows, []any{&raw}, func() error {
			var t lifecycle.Target
			if err := json.Unmarshal(raw, &t); err != nil {
				return fmt.Errorf("read target: %w", err)
			}
			c.targets[t.Name] = t
			return nil
		})
		return err
	})
	b.Queue(`SELECT spec FROM sources`).Query(func(rows pgx.Rows) error {
		var raw []byte
		_, err := pgx.ForEachRow(rows, []any{&raw}, func() error {
			var s lifecycle.Source
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("read source: %w", err)
			}
			c.sources[s.Name] = s
			return nil
		})
		return err
	})
	queueSettings(b, false, &c.settings)
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	// The programs of the cached table are reused, so a reload compiles
	// only the filters that changed.
	w.mu.Lock()
	prev := w.cached
	w.mu.Unlock()
	var prevTable *routing.Table
	var prevTransforms routing.Transforms
	if prev != nil {
		prevTable, prevTransforms = prev.table, prev.transforms
	}
	var err error
	if c.table, err = routing.NewTable(c.routes, prevTable); err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	if c.transforms, err = routing.NewTransforms(c.targets, prevTransforms); err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	return c, nil
}

// Routes returns every route, oldest first.
func (w *Writer) Routes(ctx context.Context) ([]lifecycle.Route, error) {
	c, err := w.loadConfig(ctx)
	if err != nil {
		return nil, err
	}
	return c.routes, nil
}

// Targets returns every target, by name.
func (w *Writer) Targets(ctx context.Context) ([]lifecycle.Target, error) {
	c, err := w.loadConfig(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]lifecycle.Target, 0, len(c.targets))
	for _, t := range c.targets {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b lifecycle.Target) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Settings returns the settings in force.
func (w *Writer) Settings(ctx context.Context) (lifecycle.Settings, error) {
	var s lifecycle.Settings
	b := &pgx.Batch{}
	queueSettings(b, false, &s)
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return lifecycle.Settings{}, fmt.Errorf("read the settings: %w", err)
	}
	return s, nil
}

// QueueSharedSettings queues the read of the settings in force into s,
// with their row locked FOR SHARE until the transaction ends: a change of
// them waits for the transaction to end, and one committed before the read
// is what it reads. A transaction that must not commit under settings
// older than those in force at its commit reads them so.
func QueueSharedSettings(b *pgx.Batch, s *lifecycle.Settings) { queueSettings(b, true, s) }

// queueSettings queues the read of the stored settings into s, with their
// defaults filled in; the defaults alone when none are stored. With share,
// as QueueSharedSettings.
func queueSettings(b *pgx.Batch, share bool, s *lifecycle.Settings) {
	*s = lifecycle.DefaultSettings()
	sql := `SELECT value FROM settings`
	if share {
		sql += ` FOR SHARE`
	}
	b.Queue(sql).Query(func(rows pgx.Rows) error {
		var raw []byte
		_, err := pgx.ForEachRow(rows, []any{&raw}, func() error {
			if err := json.Unmarshal(raw, s); err != nil {
				return fmt.Errorf("read the settings: %w", err)
			}
			*s = s.WithDefaults()
			return nil
		})
		return err
	})
}

// CachedSettings returns the settings as the commands decide with them:
// cached as the routes are (config), so a caller that asks often costs no
// query each time.
func (w *Writer) CachedSettings(ctx context.Context) (lifecycle.Settings, error) {
	c, err := w.config(ctx)
	if err != nil {
		return lifecycle.Settings{}, err
	}
	return c.settings, nil
}

// changeConfig runs one configuration command: decide looks at the current
// configuration and returns the events and the table writes, and all are
// written in one transaction as the next versions of the config stream; no
// events, nothing to do.
func (w *Writer) changeConfig(ctx context.Context, actor string,
	decide func(c *configState, now time.Time) ([]journal.Payload, func(b *pgx.Batch), error)) error {
	if err := journal.CheckActor(actor); err != nil {
		return invalid(err)
	}
	for try := 1; ; try++ {
		c, err := w.loadConfig(ctx)
		if err != nil {
			return err
		}
		now := w.now()
		payloads, writes, err := decide(c, now)
		if err != nil || len(payloads) == 0 {
			return err
		}
		// The table writes come first: one that waits for the row an
		// outcome's batch holds while it disables its target (gone.go)
		// then loses on the stream's version after that batch commits,
		// rather than holding a version the batch would wait for.
		b := &pgx.Batch{}
		writes(b)
		for i, p := range payloads {
			e := journal.Event{RecordedAt: now, Stream: journal.ConfigStream, Version: c.version + 1 + i, Actor: actor, Payload: p}
			if err := journal.Queue(b, e); err != nil {
				return invalid(err)
			}
		}
		err = w.send(ctx, w.db, b)
		if retryable(err) && try < maxTries {
			continue
		}
		if err != nil {
			return err
		}
		w.Invalidate()
		return nil
	}
}

// CreateTarget adds a target, with its kind's defaults filled in;
// ErrExists when the name is taken, by a target of any kind.
func (w *Writer) CreateTarget(ctx context.Context, t lifecycle.Target, actor string) (lifecycle.Target, error) {
	t, err := w.changeTarget(ctx, t, actor, true, false)
	if err != nil {
		return t, fmt.Errorf("create target %s: %w", t.Name, err)
	}
	return t, nil
}

// UpdateTarget replaces a target's definition; ErrNotFound when it has none.
func (w *Writer) UpdateTarget(ctx context.Context, t lifecycle.Target, actor string) (lifecycle.Target, error) {
	t, err := w.changeTarget(ctx, t, actor, false, false)
	if err != nil {
		return t, fmt.Errorf("update target %s: %w", t.Name, err)
	}
	return t, nil
}

// UpdateTargetKeepingEnabled replaces a target's definition as
// UpdateTarget does but for its enabled, which stays as the configuration
// has it when the change is written: a disabling that commits after the
// caller read the target (a 410, disable_after) stands.
func (w *Writer) UpdateTargetKeepingEnabled(ctx context.Context, t lifecycle.Target, actor string) (lifecycle.Target, error) {
	t, err := w.changeTarget(ctx, t, actor, false, true)
	if err != nil {
		return t, fmt.Errorf("update target %s: %w", t.Name, err)
	}
	return t, nil
}

func (w *Writer) changeTarget(ctx context.Context, t lifecycle.Target, actor string, create, keepEnabled bool) (lifecycle.Target, error) {
	signingGiven := t.Signing != nil
	t, err := targets.Prepare(t)
	if t.Transform != "" && len(t.Transform) <= lifecycle.MaxFilterLength {
		if _, terr := routing.CompileTransform(t.Transform); terr != nil {
			err = errors.Join(err, terr)
		}
	}
	if err != nil {
		return t, invalid(err)
	}
	// Prepare made the signing a copy of its own, so the key leaves the
	// definition without touching the caller's.
	var given string
	if t.Signing != nil {
		given, t.Signing.Key, t.Signing.Keys = t.Signing.Key, "", nil
	}
	if given != "" && !create {
		return t, invalid(&lifecycle.FieldError{Field: "signing.key", Problem: "is taken only when the target is created"})
	}
	var key targets.Key
	if create && targets.Signs(t) {
		if w.secrets == nil {
			return t, ErrNoSecrets
		}
		if key, err = targets.NewKey(t.Signing.Scheme, given, w.now()); err != nil {
			return t, invalid(err)
		}
		t.Signing.Keys = []string{key.ID}
	}
	err = w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		old, exists := c.targets[t.Name]
		switch {
		case create && exists:
			return nil, nil, &ExistsError{Kind: "target", Field: "name", Value: t.Name}
		case !create && !exists:
			return nil, nil, ErrNotFound
		case !create:
			if err := keepSigning(&t, old, signingGiven); err != nil {
				return nil, nil, invalid(err)
			}
			if keepEnabled {
				// Decided on the configuration as the write finds it: a
				// disabling committed meanwhile moved the config stream,
				// so this write loses on its version and decides again.
				t.Enabled = old.Enabled
			}
		}
		spec, err := json.Marshal(t)
		if err != nil {
			return nil, nil, err
		}
		if !create {
			return []journal.Payload{&journal.TargetUpdated{Target: t, ClusterLimits: true}}, func(b *pgx.Batch) {
				b.Queue(`UPDATE targets SET spec = $2, updated_at = $3 WHERE name = $1`, t.Name, spec, now)
			}, nil
		}
		payloads := []journal.Payload{&journal.TargetCreated{Target: t, ClusterLimits: true}}
		if key.ID != "" {
			key.CreatedAt = now
			payloads = append(payloads, &journal.TargetKeyAdded{Target: t.Name, KeyID: key.ID, Scheme: key.Scheme, Fingerprint: key.Fingerprint()})
		}
		return payloads, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO targets (name, spec, created_at, updated_at) VALUES ($1, $2, $3, $3)`, t.Name, spec, now)
			if key.ID != "" {
				targets.QueueInsertKey(b, w.secrets, t.Name, key)
			}
		}, nil
	})
	return t, err
}

// keepSigning keeps an updated target's signing as it was made: its keys
// were made for its scheme, so an update that leaves signing out keeps
// it, and one that names another scheme is refused. A target made before
// targets signed has no keys: its scheme is none.
func keepSigning(t *lifecycle.Target, old lifecycle.Target, given bool) error {
	if t.Kind != "http" {
		return nil
	}
	current := lifecycle.Signing{Scheme: targets.SchemeNone}
	if old.Kind == "http" && old.Signing != nil {
		current = *old.Signing
	}
	if given && t.Signing.Scheme != current.Scheme {
		return &lifecycle.FieldError{Field: "signing.scheme",
			Problem: fmt.Sprintf("is %q and stays so: the target's keys were made for it; create another target to sign otherwise", current.Scheme)}
	}
	t.Signing = &current
	return nil
}

// TargetKeys returns the signing keys of a target that sign now, oldest
// first, opened; ErrNotFound when there is no such target.
func (w *Writer) TargetKeys(ctx context.Context, name string) ([]targets.Key, error) {
	c, err := w.loadConfig(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := c.targets[name]; !ok {
		return nil, fmt.Errorf("keys of target %s: %w", name, ErrNotFound)
	}
	if w.secrets == nil {
		return nil, ErrNoSecrets
	}
	return targets.LoadKeys(ctx, w.db, w.secrets, name, w.now())
}

// DeleteTarget removes a target no route names; ErrTargetInUse otherwise.
// Its deliveries stay, and stall unless it comes back; its health ends
// (projection.ResetHealth).
func (w *Writer) DeleteTarget(ctx context.Context, name, actor string) error {
	err := w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		if _, ok := c.targets[name]; !ok {
			return nil, nil, ErrNotFound
		}
		for _, r := range c.routes {
			if r.Target == name {
				return nil, nil, fmt.Errorf("%w: route %s sends to it", ErrTargetInUse, r.ID)
			}
		}
		return []journal.Payload{&journal.TargetDeleted{Name: name}}, func(b *pgx.Batch) {
			targets.QueueDeleteKeys(b, name)
			b.Queue(`DELETE FROM targets WHERE name = $1`, name)
			// A target made again under the name starts with a health of
			// its own, as the fold of target.deleted has it.
			projection.QueueResetHealth(b, name)
		}, nil
	})
	if err != nil {
		return fmt.Errorf("delete target %s: %w", name, err)
	}
	w.gates.forget(name)
	w.uncounted.forget(name)
	return nil
}

// CreateRoute adds a route, with a new id when r has none, and returns it.
// The target must exist (ErrInvalidTarget).
func (w *Writer) CreateRoute(ctx context.Context, r lifecycle.Route, actor string) (lifecycle.Route, error) {
	if r.ID == uuid.Nil {
		r.ID = uuid.Must(uuid.NewV7())
	}
	err := w.changeRoute(ctx, r, actor, true)
	if err != nil {
		return lifecycle.Route{}, fmt.Errorf("create route: %w", err)
	}
	return r, nil
}

// UpdateRoute replaces the route with r's id; ErrNotFound when there is none.
func (w *Writer) UpdateRoute(ctx context.Context, r lifecycle.Route, actor string) error {
	if err := w.changeRoute(ctx, r, actor, false); err != nil {
		return fmt.Errorf("update route %s: %w", r.ID, err)
	}
	return nil
}

func (w *Writer) changeRoute(ctx context.Context, r lifecycle.Route, actor string, create bool) error {
	if err := r.Validate(); err != nil {
		return invalid(err)
	}
	if r.Filter != "" {
		if _, err := routing.CompileFilter(r.Filter); err != nil {
			return invalid(err)
		}
	}
	return w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		if _, ok := c.targets[r.Target]; !ok {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalidTarget,
				&lifecycle.FieldError{Field: "target", Problem: fmt.Sprintf("no target is named %q", r.Target)})
		}
		exists := slices.ContainsFunc(c.routes, func(o lifecycle.Route) bool { return o.ID == r.ID })
		switch {
		case create && exists:
			return nil, nil, &ExistsError{Kind: "route", Field: "id", Value: r.ID.String()}
		case create:
			return []journal.Payload{&journal.RouteCreated{Route: r}}, func(b *pgx.Batch) {
				b.Queue(`INSERT INTO routes (id, source, from_pattern, to_pattern, target, types, filter, created_at, updated_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`, r.ID, r.Source, r.From, r.To, r.Target, typesArray(r.Types), r.Filter, now)
			}, nil
		case !exists:
			return nil, nil, ErrNotFound
		}
		return []journal.Payload{&journal.RouteUpdated{Route: r}}, func(b *pgx.Batch) {
			b.Queue(`UPDATE routes SET source = $2, from_pattern = $3, to_pattern = $4, target = $5, types = $6, filter = $7,
				updated_at = $8 WHERE id = $1`, r.ID, r.Source, r.From, r.To, r.Target, typesArray(r.Types), r.Filter, now)
		}, nil
	})
}

// typesArray is a route's types as their NOT NULL column holds them.
func typesArray(types []string) []string {
	if types == nil {
		return []string{}
	}
	return types
}

// DeleteRoute removes a route. Messages dispatched before keep their
// deliveries.
func (w *Writer) DeleteRoute(ctx context.Context, id uuid.UUID, actor string) error {
	err := w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		if !slices.ContainsFunc(c.routes, func(o lifecycle.Route) bool { return o.ID == id }) {
			return nil, nil, ErrNotFound
		}
		return []journal.Payload{&journal.RouteDeleted{ID: id}}, func(b *pgx.Batch) {
			b.Queue(`DELETE FROM routes WHERE id = $1`, id)
		}, nil
	})
	if err != nil {
		return fmt.Errorf("delete route %s: %w", id, err)
	}
	return nil
}

// SetSettings replaces the settings; optional fields left at zero take
// their defaults, and the settings stored and journaled have them filled.
func (w *Writer) SetSettings(ctx context.Context, s lifecycle.Settings, actor string) error {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return invalid(err)
	}
	value, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("set settings: %w", err)
	}
	err = w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		return []journal.Payload{&journal.SettingsChanged{Settings: s}}, func(b *pgx.Batch) {
			b.Queue(`INSERT INTO settings (singleton, value) VALUES (true, $1)
				ON CONFLICT (singleton) DO UPDATE SET value = excluded.value`, value)
		}, nil
	})
	if err != nil {
		return fmt.Errorf("set settings: %w", err)
	}
	return nil
}

// Try decides where m would go and what each target's transform would
// make of its delivery, by the configuration dispatch decides with now
// (package routing's Try), writing nothing.
func (w *Writer) Try(ctx context.Context, m routing.Message) (routing.Trial, error) {
	cfg, err := w.config(ctx)
	if err != nil {
		return routing.Trial{}, fmt.Errorf("try the routes: %w", err)
	}
	return routing.Try(cfg.table, cfg.transforms, m, cfg.maxPayload), nil
}
