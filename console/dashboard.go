package console

import (
	"net/http"
	"net/url"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// dashboardView is the figures of GET /stats and the targets.
type dashboardView struct {
	Stats projection.Stats
	// At is when the figures were read.
	At      time.Time
	States  []stateCount
	Targets []targetRow
	// The lists behind the cards.
	Errors, Stalled, Refused, Week string
	// Charts are the outcomes of all targets over time.
	Charts chartSet
}

// targetRow is a target and its figures (zero for one that has had no
// delivery).
type targetRow struct {
	lifecycle.Target
	Figures projection.TargetStats
}

// stateCount is one row of the deliveries by state.
type stateCount struct {
	State lifecycle.DeliveryState
	N     int64
}

// dashboard shows the figures, and refreshes them every few seconds.
func (c *Console) dashboard(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	now := c.cfg.Now().UTC()
	stats, err := projection.ReadStats(r.Context(), c.cfg.DB, now)
	if err != nil {
		return err
	}
	targets, err := c.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	if targets, err = projection.WithHealth(r.Context(), c.cfg.DB, targets, now); err != nil {
		return err
	}
	minutes, err := readMinutes(r.Context(), c.cfg.DB, "", now)
	if err != nil {
		return err
	}
	v := dashboardView{Stats: stats, At: now, Charts: charts(minutes, now, "all-", false),
		Errors:  listURL(url.Values{"status": {string(lifecycle.StatusError)}, "created_after": {formTime(now.Add(-24 * time.Hour))}}),
		Stalled: listURL(url.Values{"status": {string(lifecycle.StatusStalled)}, "created_after": {formTime(now.Add(-24 * time.Hour))}}),
		Refused: listURL(url.Values{"status": {string(lifecycle.StatusRefused)}, "created_after": {formTime(now.Add(-24 * time.Hour))}}),
		Week:    listURL(url.Values{"created_after": {formTime(now.Add(-7 * 24 * time.Hour))}}),
	}
	figures := make(map[string]projection.TargetStats, len(stats.Targets))
	for _, f := range stats.Targets {
		figures[f.Target] = f
	}
	for _, t := range targets {
		v.Targets = append(v.Targets, targetRow{Target: t, Figures: figures[t.Name]})
	}
	for _, s := range lifecycle.CountedStates {
		v.States = append(v.States, stateCount{State: s, N: stats.DeliveriesByState[s]})
	}
	c.render(w, r, http.StatusOK, "dashboard", page{Title: "Dashboard", Nav: "dashboard", View: v})
	return nil
}

// listURL is the messages list with the filters q.
func listURL(q url.Values) string {
	if len(q) == 0 {
		return "/ui/messages"
	}
	return "/ui/messages?" + q.Encode()
}
