package console

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// routesView is the list of routes and the form that adds one.
type routesView struct {
	Routes  []lifecycle.Route
	Targets []lifecycle.Target
	Form    lifecycle.Route
	Problem *errorView
}

// routesPage lists the routes, oldest first.
func (c *Console) routesPage(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	return c.showRoutes(w, r, http.StatusOK, routesView{Form: lifecycle.Route{From: lifecycle.AnyParty, To: lifecycle.AnyParty}})
}

func (c *Console) showRoutes(w http.ResponseWriter, r *http.Request, status int, v routesView) error {
	var err error
	if v.Routes, err = c.cfg.Writer.Routes(r.Context()); err != nil {
		return err
	}
	if v.Targets, err = c.cfg.Writer.Targets(r.Context()); err != nil {
		return err
	}
	c.render(w, r, status, "routes", page{Title: "Routes", Nav: "routes", View: v})
	return nil
}

// createRoute adds the route of the form (POST /routes).
func (c *Console) createRoute(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	get := func(name string) string { return strings.TrimSpace(r.PostForm.Get(name)) }
	rt := lifecycle.Route{Source: get("source"), From: get("from"), To: get("to"), Target: get("target"), Filter: get("filter")}
	for t := range strings.SplitSeq(get("types"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			rt.Types = append(rt.Types, t)
		}
	}
	created, err := c.cfg.Writer.CreateRoute(r.Context(), rt, journal.OperatorActor(s.Name))
	if err != nil {
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		return c.showRoutes(w, r, p.Status, routesView{Form: rt, Problem: &p})
	}
	c.configChanged()
	c.log.Info("route created", "route_id", created.ID, "operator", s.Name, "via", "console")
	c.done(w, r, "/ui/routes", "Route added: "+routeText(created)+".")
	return nil
}

// deleteRoute asks, then deletes a route (DELETE /routes/{id}).
func (c *Console) deleteRoute(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	routes, err := c.cfg.Writer.Routes(r.Context())
	if err != nil {
		return err
	}
	var rt *lifecycle.Route
	for i := range routes {
		if routes[i].ID == id {
			rt = &routes[i]
		}
	}
	if rt == nil {
		return fmt.Errorf("route %s: %w", id, commands.ErrNotFound)
	}
	v := confirmView{Question: "Delete the route " + routeText(*rt) + "?", Button: "Delete", Danger: true, Back: "/ui/routes",
		Explanation: "Messages dispatched from now on no longer go to " + rt.Target + " by this route. " +
			"The deliveries it made stay as they are."}
	return c.confirm(w, r, "Delete a route", v, func() (string, error) {
		if err := c.cfg.Writer.DeleteRoute(r.Context(), id, journal.OperatorActor(s.Name)); err != nil {
			return "", err
		}
		c.configChanged()
		c.log.Info("route deleted", "route_id", id, "operator", s.Name, "via", "console")
		return "Route deleted: " + routeText(*rt) + ".", nil
	})
}

// routeText is a route in words.
func routeText(rt lifecycle.Route) string {
	s := fmt.Sprintf("from %s (%s → %s) to %s", rt.Source, rt.From, rt.To, rt.Target)
	if len(rt.Types) > 0 {
		s += ", types " + strings.Join(rt.Types, ", ")
	}
	if rt.Filter != "" {
		s += ", filter " + rt.Filter
	}
	return s
}
