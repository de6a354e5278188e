package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/redact"
)

func (s *Server) listTargets(w http.ResponseWriter, r *http.Request) error {
	targets, err := s.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	if targets, err = projection.WithHealth(r.Context(), s.cfg.DB, targets, s.cfg.Now()); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, TargetList{Items: nonNil(targetsForCaller(r, targets))})
	return nil
}

// targetsForCaller is the targets as the request's token may see them: a
// token that may not administer sees each header's value and the URL's
// password masked (redact.Target); an admin, who writes the definitions,
// sees them as stored.
func targetsForCaller(r *http.Request, targets []lifecycle.Target) []lifecycle.Target {
	if !redact.Hides(identity(r).Role) {
		return targets
	}
	return redact.Targets(targets)
}

// targetName reads a target's or a source's name from the path.
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
			shown, err := projection.WithHealth(r.Context(), s.cfg.DB, []lifecycle.Target{t}, s.cfg.Now())
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, targetsForCaller(r, shown)[0])
			return nil
		}
	}
	return fmt.Errorf("target %s: %w", name, commands.ErrNotFound)
}

// closeBreaker closes a target's breaker by hand (journaled with the
// operator) and answers the target as getTarget does.
func (s *Server) closeBreaker(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	if _, err := s.cfg.Writer.CloseBreaker(r.Context(), name, actor(r)); err != nil {
		return err
	}
	s.log.Info("target breaker closed", "target", name, "operator", identity(r).Name)
	return s.getTarget(w, r)
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
// keeps the target's value as the change is written, so it never undoes a
// disabling that commits meanwhile (a 410, disable_after); an unknown
// target is left to UpdateTarget, which checks the body before it answers
// 404.
func (s *Server) updateTarget(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	var body json.RawMessage
	if err := s.readJSON(w, r, &body, false); err != nil {
		return err
	}
	var t lifecycle.Target
	if err := decodeStrict(body, &t); err != nil {
		return err
	}
	switch t.Name {
	case "":
		t.Name = name
	case name:
	default:
		return fieldError("name", fmt.Sprintf("%q differs from the path's %q: a target cannot be renamed", t.Name, name))
	}
	update := s.cfg.Writer.UpdateTarget
	var given struct {
		Enabled *bool `json:"enabled"`
	}
	if err := json.Unmarshal(body, &given); err != nil || given.Enabled == nil {
		update = s.cfg.Writer.UpdateTargetKeepingEnabled
	}
	t, err = update(r.Context(), t, actor(r))
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
