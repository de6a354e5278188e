package httpapi

import (
	"net/http"

	"github.com/waybill/waybill/projection"
)

// stats answers the figures of the dashboard (projection.ReadStats).
func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	st, err := projection.ReadStats(r.Context(), s.cfg.DB, s.cfg.Now())
	if err != nil {
		return err
	}
	out := Stats{InFlightMessages: st.InFlightMessages, FailedLast24h: st.FailedLast24h,
		RefusedLast24h: st.RefusedLast24h, MessagesLast7d: st.MessagesLast7d, DeliveriesByState: st.DeliveriesByState,
		DueDeliveries: st.DueDeliveries, OldestDueSeconds: st.OldestDue.Seconds(), Targets: make([]TargetStats, len(st.Targets))}
	for i, t := range st.Targets {
		out.Targets[i] = TargetStats{Target: t.Target, InFlight: t.InFlight, FailedLast24h: t.FailedLast24h,
			OldestDueSeconds: t.OldestDue.Seconds()}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
