package console

import (
	"fmt"
	"net/http"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/projection"
)

// rebuildView is the last online rebuild this server started, if any.
type rebuildView struct {
	Run   httpapi.Rebuild
	Found bool
}

// Running says the rebuild has not ended: its progress reloads.
func (v rebuildView) Running() bool {
	return v.Found && v.Run.FinishedAt == nil
}

// Percent is how far the fold is through the snapshot's events.
func (v rebuildView) Percent() int {
	if v.Run.Total == 0 {
		return 100
	}
	return min(100, v.Run.Events*100/v.Run.Total)
}

// Tone is the badge colour of the phase.
func (v rebuildView) Tone() string {
	switch v.Run.Phase {
	case projection.PhaseDone:
		if v.Run.Violations != nil && *v.Run.Violations > 0 {
			return "bad"
		}
		return "ok"
	case projection.PhaseFailed:
		return "bad"
	}
	return "info"
}

// LockHeld is how long the switch held the live tables, once it has.
func (v rebuildView) LockHeld() string {
	if v.Run.LockHeldMs == nil {
		return ""
	}
	return duration(time.Duration(*v.Run.LockHeldMs) * time.Millisecond)
}

// rebuildPage shows the last online rebuild this server started and where
// it stands, reloaded every second while it runs, and offers to start one.
func (c *Console) rebuildPage(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	run, found := c.cfg.Rebuilds.Latest()
	c.render(w, r, http.StatusOK, "rebuild", page{Title: "Online rebuild", Nav: "settings", View: rebuildView{Run: run, Found: found}})
	return nil
}

// startRebuild asks, then starts an online rebuild in this server
// (POST /rebuild/start), as POST /api/v1/rebuilds does.
func (c *Console) startRebuild(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	v := confirmView{
		Question: "Rebuild the projections online?",
		Explanation: "The messages, deliveries and every table derived from the journal are built again beside the live ones, " +
			"from the journal, with this server's build, while every server keeps serving: the journal is folded into tables " +
			"of their own, the events committed meanwhile are caught up, then the live tables are locked for a moment " +
			"(commands wait, they do not fail), the last events applied and the new tables switched in; an audit of them ends it. " +
			"Servers of another build stop writing from the switch on. It takes about the time of an offline rebuild, " +
			"and as much memory as the whole fold; one runs at a time on the database.",
		Button: "Start the online rebuild",
		Back:   "/ui/rebuild",
	}
	return c.confirm(w, r, "Online rebuild", v, func() (string, error) {
		run := c.cfg.Rebuilds.Start(s.Name)
		return fmt.Sprintf("Online rebuild %s started.", run.ID), nil
	})
}
