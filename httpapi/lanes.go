package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// The bounds of a page of lanes.
const (
	defaultLaneLimit = 50
	maxLaneLimit     = 500
)

// listLanes pages a target's lanes by ordering key; blocked=true keeps
// those with deliveries waiting.
func (s *Server) listLanes(w http.ResponseWriter, r *http.Request) error {
	name, err := targetName(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var (
		errs    []error
		blocked bool
	)
	if v := q.Get("blocked"); v != "" {
		if blocked, err = strconv.ParseBool(v); err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: "blocked", Problem: fmt.Sprintf("%q: allowed are true, false", v)})
		}
	}
	limit, err := limitOf(q, defaultLaneLimit, maxLaneLimit)
	errs = append(errs, err)
	after := ""
	if v := q.Get("cursor"); v != "" {
		after, err = projection.ParseLaneCursor(v)
		errs = append(errs, err)
	}
	if err := invalid(errs...); err != nil {
		return err
	}
	targets, err := s.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(targets, func(t lifecycle.Target) bool { return t.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: no target %q", commands.ErrNotFound, name)
	}
	lanes, err := projection.ListLanes(r.Context(), s.cfg.DB, name, blocked, after, limit+1)
	if err != nil {
		return err
	}
	out := LaneList{Items: make([]Lane, 0, min(len(lanes), limit)),
		OrderingMode: targets[i].Ordering.WithDefaults().Mode}
	for i, l := range lanes {
		if i == limit {
			next := projection.LaneCursor(lanes[i-1].Key)
			out.NextCursor = &next
			break
		}
		out.Items = append(out.Items, laneOf(l))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// laneOf is the resource of a lane.
func laneOf(l projection.LaneWithHead) Lane {
	out := Lane{OrderingKey: l.Key, Waiting: l.Waiting, WaitingSince: optionalTime(l.WaitingSince)}
	if l.Head != uuid.Nil {
		out.Head = &LaneHead{MessageID: l.HeadMessage, DeliveryID: l.Head, State: l.HeadState, Since: l.HeadSince}
	}
	return out
}
