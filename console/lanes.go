package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// lanePageSize is the number of lanes a page shows: the API's default.
const lanePageSize = 50

// lanesView is a page of a target's lanes.
type lanesView struct {
	Target lifecycle.Target
	// Blocked keeps the lanes with deliveries waiting.
	Blocked bool
	Lanes   []projection.LaneWithHead
	Problem *errorView
	// Next is the next page, First the first; "" when there is none or
	// this is it.
	Next, First string
}

// lanes shows a page of a target's lanes by ordering key, read as GET
// /targets/{name}/lanes reads them: a range of the lanes table, never a
// scan of the deliveries.
func (c *Console) lanes(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := lanesView{Target: t}
	q := r.URL.Query()
	var errs []error
	if s := q.Get("blocked"); s != "" {
		if v.Blocked, err = strconv.ParseBool(s); err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: "blocked", Problem: fmt.Sprintf("%q: allowed are true, false", s)})
		}
	}
	after := ""
	if s := q.Get("cursor"); s != "" {
		after, err = projection.ParseLaneCursor(s)
		errs = append(errs, err)
	}
	status := http.StatusOK
	if err := invalid(errs...); err != nil {
		p := problemOf(err)
		v.Problem, status = &p, p.Status
	} else {
		lanes, err := projection.ListLanes(r.Context(), c.cfg.DB, t.Name, v.Blocked, after, lanePageSize+1)
		if err != nil {
			return err
		}
		if len(lanes) > lanePageSize {
			lanes = lanes[:lanePageSize]
			v.Next = lanesURL(t.Name, v.Blocked, projection.LaneCursor(lanes[len(lanes)-1].Key))
		}
		v.Lanes = lanes
		if after != "" {
			v.First = lanesURL(t.Name, v.Blocked, "")
		}
	}
	c.render(w, r, status, "lanes", page{Title: "Lanes of " + t.Name, Nav: "targets", View: v})
	return nil
}

// lanesURL is a page of a target's lanes.
func lanesURL(target string, blocked bool, cursor string) string {
	q := url.Values{}
	if blocked {
		q.Set("blocked", "true")
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	u := "/ui/targets/" + target + "/lanes"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}
