package httpapi

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
)

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
	rt, err := s.cfg.Writer.CreateRoute(r.Context(), req.route(uuid.Nil), actor(r))
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
	rt := req.route(id)
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
