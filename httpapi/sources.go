package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/sources"
)

// SourceRequest is the body of POST /sources and PUT /sources/{name}.
type SourceRequest struct {
	Name    string          `json:"name"`
	Kind    string          `json:"kind"`
	Enabled bool            `json:"enabled"`
	Config  json.RawMessage `json:"config"`
	// Status is what a source read shows of its running, ignored: a
	// definition read can be sent back as it is.
	Status json.RawMessage `json:"status,omitempty"`
}

// Source is the source resource: its definition, defaults filled, and
// what its running shows.
type Source struct {
	Name    string          `json:"name"`
	Kind    string          `json:"kind"`
	Enabled bool            `json:"enabled"`
	Config  json.RawMessage `json:"config"`
	Status  SourceStatus    `json:"status"`
}

// SourceStatus is a source's progress and faults, as the process polling
// it last recorded them.
type SourceStatus struct {
	// Holder names the process that holds the source's lease, and
	// LeaseEnd when the lease runs out; null when no process holds it.
	Holder   *string    `json:"holder"`
	LeaseEnd *time.Time `json:"lease_end"`
	// LastPollAt is when the source was last polled; null before.
	LastPollAt *time.Time `json:"last_poll_at"`
	// LastError is the last failure and LastErrorAt its time; null when
	// there was none.
	LastError   *string    `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
	// Backlog is what the source had still to take at its last poll.
	Backlog int64 `json:"backlog"`
	// Watermark and MarkersOwed are an inbox_table's: every id up to the
	// watermark has been taken or passed, and the markers owed are yet
	// to be written. Null for other kinds.
	Watermark   *int64 `json:"watermark"`
	MarkersOwed *int64 `json:"markers_owed"`
}

// SourceList is every source, by name.
type SourceList struct {
	Items []Source `json:"items"`
}

// SourcesOf is the resource of each source of defs: its definition with
// its status. The console reads them here too, so it shows what the API
// answers.
func SourcesOf(ctx context.Context, db *pgxpool.Pool, defs []lifecycle.Source) ([]Source, error) {
	one := "" // one source's state is one row to read
	if len(defs) == 1 {
		one = defs[0].Name
	}
	states, err := sources.States(ctx, db, one)
	if err != nil {
		return nil, err
	}
	out := make([]Source, 0, len(defs))
	for _, d := range defs {
		s := states[d.Name]
		st := SourceStatus{Holder: s.Holder, LeaseEnd: s.LeaseEnd, LastPollAt: s.LastPollAt,
			LastError: s.LastError, LastErrorAt: s.LastErrorAt, Backlog: s.Backlog}
		for _, t := range []**time.Time{&st.LeaseEnd, &st.LastPollAt, &st.LastErrorAt} {
			if *t != nil {
				utc := (*t).UTC()
				*t = &utc
			}
		}
		if d.Kind == sources.KindInboxTable {
			st.Watermark, st.MarkersOwed = &s.Watermark, &s.MarkersOwed
		}
		out = append(out, Source{Name: d.Name, Kind: d.Kind, Enabled: d.Enabled, Config: d.Config, Status: st})
	}
	return out, nil
}

func (s *Server) listSources(w http.ResponseWriter, r *http.Request) error {
	defs, err := s.cfg.Writer.Sources(r.Context())
	if err != nil {
		return err
	}
	items, err := SourcesOf(r.Context(), s.cfg.DB, defs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, SourceList{Items: forCaller(r, items)})
	return nil
}

// forCaller is the sources as the request's token may see them: a token
// that may not administer sees each database_url with its passwords
// masked (redact.Hides, redact.SourceConfig); an admin, who writes the
// definitions, sees them as stored.
func forCaller(r *http.Request, items []Source) []Source {
	if !redact.Hides(identity(r).Role) {
		return items
	}
	for i := range items {
		items[i].Config, _ = redact.SourceConfig(items[i].Config)
	}
	return items
}

// source answers one source as stored, with its status.
func (s *Server) source(w http.ResponseWriter, r *http.Request, status int, name string) error {
	defs, err := s.cfg.Writer.Sources(r.Context())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(defs, func(d lifecycle.Source) bool { return d.Name == name })
	if i < 0 {
		return fmt.Errorf("source %s: %w", name, commands.ErrNotFound)
	}
	items, err := SourcesOf(r.Context(), s.cfg.DB, defs[i:i+1])
	if err != nil {
		return err
	}
	writeJSON(w, status, forCaller(r, items)[0])
	return nil
}

func (s *Server) getSource(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	return s.source(w, r, http.StatusOK, name)
}

// createSource adds a source, enabled unless the body says otherwise.
func (s *Server) createSource(w http.ResponseWriter, r *http.Request) error {
	req := SourceRequest{Enabled: true}
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	src, err := s.cfg.Writer.CreateSource(r.Context(),
		lifecycle.Source{Name: req.Name, Kind: req.Kind, Enabled: req.Enabled, Config: req.Config}, actor(r))
	if err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("source created", "source", src.Name, "kind", src.Kind, "operator", identity(r).Name)
	w.Header().Set("Location", Prefix+"/sources/"+src.Name)
	return s.source(w, r, http.StatusCreated, src.Name)
}

// updateSource replaces a source's definition, as updateTarget does a
// target's: enabled left out keeps its current value, and the name is the
// path's.
func (s *Server) updateSource(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	current, err := s.cfg.Writer.Sources(r.Context())
	if err != nil {
		return err
	}
	var req SourceRequest
	if i := slices.IndexFunc(current, func(c lifecycle.Source) bool { return c.Name == name }); i >= 0 {
		req.Enabled = current[i].Enabled
	}
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	switch req.Name {
	case "":
		req.Name = name
	case name:
	default:
		return fieldError("name", fmt.Sprintf("%q differs from the path's %q: a source cannot be renamed", req.Name, name))
	}
	src, err := s.cfg.Writer.UpdateSource(r.Context(),
		lifecycle.Source{Name: req.Name, Kind: req.Kind, Enabled: req.Enabled, Config: req.Config}, actor(r))
	if err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("source updated", "source", src.Name, "enabled", src.Enabled, "operator", identity(r).Name)
	return s.source(w, r, http.StatusOK, src.Name)
}

func (s *Server) deleteSource(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	if err := s.cfg.Writer.DeleteSource(r.Context(), name, actor(r)); err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("source deleted", "source", name, "operator", identity(r).Name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
