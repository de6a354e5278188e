package console

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/routing"
)

// tryView is the "try it" box: a message pasted or picked, and what the
// routes and the targets' transforms make of it.
type tryView struct {
	Form    tryForm
	Recent  []*projection.Message
	Trial   *routing.Trial
	Problem *errorView
}

// tryForm is the box's fields as given.
type tryForm struct {
	Message, Source, From, To, Type, ContentType, Headers, Payload string
}

// recentTries is how many recent messages the box offers.
const recentTries = 20

// tryRoutes shows the box (GET /ui/try) and tries the message it is given
// (POST), writing nothing; the routes' and targets' pages load the box. A
// session that may not administer sees the values of the headers a
// transform sets masked (redact.Shape).
func (c *Console) tryRoutes(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	v := tryView{Form: tryForm{ContentType: "application/json"}}
	var err error
	if v.Recent, _, err = projection.ListMessages(r.Context(), c.cfg.DB, projection.MessageFilter{Limit: recentTries}); err != nil {
		return err
	}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		get := func(name string) string { return r.PostForm.Get(name) }
		v.Form = tryForm{Message: strings.TrimSpace(get("message")), Source: strings.TrimSpace(get("source")),
			From: strings.TrimSpace(get("from")), To: strings.TrimSpace(get("to")), Type: strings.TrimSpace(get("type")),
			ContentType: strings.TrimSpace(get("content_type")), Headers: get("headers"), Payload: get("payload")}
		m, err := c.tryMessage(r, &v.Form)
		if err == nil {
			var trial routing.Trial
			if trial, err = c.cfg.Writer.Try(r.Context(), m); err == nil {
				for target, shaped := range trial.Shapes {
					if shaped != nil && redact.Hides(s.Role) {
						masked := *shaped
						masked.Shape = redact.Shape(shaped.Shape)
						trial.Shapes[target] = &masked
					}
				}
				v.Trial = &trial
			}
		}
		if err != nil {
			p := problemOf(err)
			if p.Status >= http.StatusInternalServerError {
				return err
			}
			v.Problem, status = &p, p.Status
		}
	}
	c.render(w, r, status, "try", page{Title: "Try the routes", Nav: "routes", View: v})
	return nil
}

// tryMessage is the message the form gives: a stored one it picks, whose
// fields it then shows, or the one pasted.
func (c *Console) tryMessage(r *http.Request, f *tryForm) (routing.Message, error) {
	if f.Message != "" {
		id, err := uuid.Parse(f.Message)
		if err != nil {
			return routing.Message{}, invalidField("message", "is not a message id")
		}
		m, err := projection.Load(r.Context(), c.cfg.DB, id)
		if err != nil {
			return routing.Message{}, err
		}
		p, err := projection.LoadPayload(r.Context(), c.cfg.DB, id, 0)
		if err != nil && !errors.Is(err, projection.ErrPayloadExpunged) {
			return routing.Message{}, err
		}
		var headers []string
		for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
			headers = append(headers, name+": "+m.Headers[name])
		}
		*f = tryForm{Message: f.Message, Source: m.Source, From: m.From, To: m.To, Type: m.Type, ContentType: m.ContentType,
			Headers: strings.Join(headers, "\n"), Payload: string(p.Body)}
		return commands.RoutingMessage(m, p.Body), nil
	}
	h := map[string]string{}
	for line := range strings.SplitSeq(f.Headers, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return routing.Message{}, invalidField("headers", "one header a line, as name: value")
		}
		h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	headers, err := lifecycle.LowerHeaders("headers", h)
	if err != nil {
		return routing.Message{}, invalid(err)
	}
	if f.ContentType == "" {
		f.ContentType = "application/octet-stream"
	}
	return routing.Message{Source: f.Source, From: f.From, To: f.To, Type: f.Type, Headers: headers, ContentType: f.ContentType,
		Size: int64(len(f.Payload)), Payload: []byte(f.Payload)}, nil
}
