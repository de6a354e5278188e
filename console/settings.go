package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// settingsView is the settings and their form.
type settingsView struct {
	MaxDispatches string
	Min, Max      int
	Problem       *errorView
}

// settings shows the settings, and saves them (PUT /settings).
func (c *Console) settings(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	current, err := c.cfg.Writer.Settings(r.Context())
	if err != nil {
		return err
	}
	v := settingsView{MaxDispatches: strconv.Itoa(current.Delivery.MaxDispatches),
		Min: lifecycle.MinMaxDispatches, Max: lifecycle.MaxMaxDispatches}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		v.MaxDispatches = strings.TrimSpace(r.PostForm.Get("delivery.max_dispatches"))
		n, err := strconv.Atoi(v.MaxDispatches)
		if err != nil {
			err = invalidField("delivery.max_dispatches", fmt.Sprintf("must be a whole number, not %q", v.MaxDispatches))
		} else {
			// The form changes max_dispatches alone; the other settings
			// (the callbacks' attempts, the operations' rate, retention)
			// stay as they are.
			next := current
			next.Delivery.MaxDispatches = n
			err = c.cfg.Writer.SetSettings(r.Context(), next, journal.OperatorActor(s.Name))
		}
		if err == nil {
			c.configChanged()
			c.log.Info("settings changed", "max_dispatches", n, "operator", s.Name, "via", "console")
			c.done(w, r, "/ui/settings", "Settings saved.")
			return nil
		}
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		v.Problem, status = &p, p.Status
	}
	c.render(w, r, status, "settings", page{Title: "Settings", Nav: "settings", View: v})
	return nil
}
