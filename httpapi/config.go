package httpapi

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// actor is the journal's actor for the request's token: operator:<name>.
func actor(r *http.Request) string { return journal.OperatorActor(identity(r).Name) }

func (s *Server) listRoutes(w http.ResponseWriter, r *http.Request) error {
	routes, err := s.cfg.Writer.Routes(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, RouteList{Items: nonNil(routes)})
	return nil
}

func (s *Server) getRoute(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	routes, err := s.cfg.Writer.Routes(r.Context())
	if err != nil {
		return err
	}
	for _, rt := range routes {
		if rt.ID == id {
			writeJSON(w, http.StatusOK, rt)
			return nil
		}
	}
	return fmt.Errorf("route %s: %w", id, commands.ErrNotFound)
}

func (s *Server) createRoute(w http.ResponseWriter, r *http.Request) error {
	var req RouteRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	rt, err := s.cfg.Writer.CreateRoute(r.Context(),
		lifecycle.Route{Source: req.Source, From: req.From, To: req.To, Target: req.Target}, actor(r))
	if err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("route created", "route_id", rt.ID, "operator", identity(r).Name)
	w.Header().Set("Location", Prefix+"/routes/"+rt.ID.String())
	writeJSON(w, http.StatusCreated, rt)
	return nil
}

func (s *Server) updateRoute(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req RouteRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	rt := lifecycle.Route{ID: id, Source: req.Source, From: req.From, To: req.To, Target: req.Target}
	if err := s.cfg.Writer.UpdateRoute(r.Context(), rt, actor(r)); err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("route updated", "route_id", id, "operator", identity(r).Name)
	writeJSON(w, http.StatusOK, rt)
	return nil
}

func (s *Server) deleteRoute(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if err := s.cfg.Writer.DeleteRoute(r.Context(), id, actor(r)); err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("route deleted", "route_id", id, "operator", identity(r).Name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listTargets(w http.ResponseWriter, r *http.Request) error {
	targets, err := s.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, TargetList{Items: nonNil(targets)})
	return nil
}

// targetName reads a target's name from the path.
func targetName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := lifecycle.CheckName("name", name); err != nil {
		return "", invalid(err)
	}
	return name, nil
}

func (s *Server) getTarget(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	targets, err := s.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	for _, t := range targets {
		if t.Name == name {
			writeJSON(w, http.StatusOK, t)
			return nil
		}
	}
	return fmt.Errorf("target %s: %w", name, commands.ErrNotFound)
}

// createTarget adds a target. One that leaves enabled out is enabled, as a
// user expects of a new endpoint: a new target that silently claims nothing
// is a trap.
func (s *Server) createTarget(w http.ResponseWriter, r *http.Request) error {
	// The body is decoded over this, so a field left out keeps its value.
	t := lifecycle.Target{Enabled: true}
	if err := s.readJSON(w, r, &t, false); err != nil {
		return err
	}
	t, err := s.cfg.Writer.CreateTarget(r.Context(), t, actor(r))
	if err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("target created", "target", t.Name, "operator", identity(r).Name)
	w.Header().Set("Location", Prefix+"/targets/"+t.Name)
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// updateTarget replaces a target's definition. The name is the path's; a
// body may repeat it but not change it. A body that leaves enabled out
// keeps the target's current value, as if the client had read the target
// and sent that back; an unknown target is left to UpdateTarget, which
// checks the body before it answers 404.
func (s *Server) updateTarget(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	current, err := s.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	var t lifecycle.Target
	if i := slices.IndexFunc(current, func(c lifecycle.Target) bool { return c.Name == name }); i >= 0 {
		t.Enabled = current[i].Enabled
	}
	if err := s.readJSON(w, r, &t, false); err != nil {
		return err
	}
	switch t.Name {
	case "":
		t.Name = name
	case name:
	default:
		return fieldError("name", fmt.Sprintf("%q differs from the path's %q: a target cannot be renamed", t.Name, name))
	}
	t, err = s.cfg.Writer.UpdateTarget(r.Context(), t, actor(r))
	if err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("target updated", "target", t.Name, "enabled", t.Enabled, "operator", identity(r).Name)
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *Server) deleteTarget(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	if err := s.cfg.Writer.DeleteTarget(r.Context(), name, actor(r)); err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("target deleted", "target", name, "operator", identity(r).Name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getSettings(w http.ResponseWriter, r *http.Request) error {
	settings, err := s.cfg.Writer.Settings(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, settings)
	return nil
}

func (s *Server) putSettings(w http.ResponseWriter, r *http.Request) error {
	var settings lifecycle.Settings
	if err := s.readJSON(w, r, &settings, false); err != nil {
		return err
	}
	if err := s.cfg.Writer.SetSettings(r.Context(), settings, actor(r)); err != nil {
		return err
	}
	s.configChanged()
	s.log.Info("settings changed", "max_dispatches", settings.Delivery.MaxDispatches, "operator", identity(r).Name)
	writeJSON(w, http.StatusOK, settings)
	return nil
}

// nonNil makes an empty list [] in JSON rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
