package httpapi

import (
	"net/http"

	"github.com/waybill/waybill/lifecycle"
)

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
	settings = settings.WithDefaults()
	s.log.Info("settings changed", "max_dispatches", settings.Delivery.MaxDispatches,
		"operations_rate", settings.Operations.Rate, "retention", settings.Retention.String(), "operator", identity(r).Name)
	writeJSON(w, http.StatusOK, settings)
	return nil
}
