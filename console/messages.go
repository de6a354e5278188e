package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// pageSize is the number of messages a page of the list shows: the API's
// default.
const pageSize = 50

// messagesView is a page of the messages list and its filters.
type messagesView struct {
	Form     filterForm
	Statuses []option
	Targets  []lifecycle.Target
	Messages []*projection.Message
	Problem  *errorView
	// Next is the next page, First the first; "" when there is none
	// or this is it.
	Next, First string
	// Bulk is the form of a bulk operation on the messages the filter
	// chooses, "" when one cannot choose them.
	Bulk string
}

// filterForm is the filters as the form holds them.
type filterForm struct {
	Status, Source, Target, OrderingKey, PossibleDuplicate, CreatedAfter, CreatedBefore string
	Type, From, To, IdempotencyKey                                                      string
}

// values are the filters that are set, as a query.
func (f filterForm) values() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"status": f.Status, "source": f.Source, "target": f.Target,
		"ordering_key": f.OrderingKey, "possible_duplicate": f.PossibleDuplicate, "created_after": f.CreatedAfter,
		"created_before": f.CreatedBefore, "type": f.Type, "from": f.From, "to": f.To, "idempotency_key": f.IdempotencyKey} {
		if v != "" {
			q.Set(name, v)
		}
	}
	return q
}

// option is one choice of a select.
type option struct {
	Value, Label string
	Selected     bool
}

// messages shows a page of the list with the filters of GET /messages.
func (c *Console) messages(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	q := r.URL.Query()
	f, form, err := parseFilter(q)
	targets, terr := c.cfg.Writer.Targets(r.Context())
	if terr != nil {
		return terr
	}
	v := messagesView{Form: form, Targets: targets, Bulk: bulkLink(form)}
	for _, s := range lifecycle.MessageStatuses {
		v.Statuses = append(v.Statuses, option{Value: string(s), Label: s.Label(), Selected: string(s) == form.Status})
	}
	status := http.StatusOK
	if err != nil {
		p := problemOf(err)
		v.Problem, status = &p, p.Status
	} else {
		page, next, err := projection.ListMessages(r.Context(), c.cfg.DB, f)
		if err != nil {
			return err
		}
		v.Messages = page
		if next != nil {
			nq := form.values()
			nq.Set("cursor", next.String())
			v.Next = listURL(nq)
		}
		if f.After != nil {
			v.First = listURL(form.values())
		}
	}
	c.render(w, r, status, "messages", page{Title: "Messages", Nav: "messages", View: v})
	return nil
}

// parseFilter reads the list's filters from the query, checked as the API
// checks them; the form's values come back as given, for the form. The
// ordering key is taken as it is, spaces and all, as the API takes it: a
// key may hold them.
func parseFilter(q url.Values) (projection.MessageFilter, filterForm, error) {
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	form := filterForm{Status: get("status"), Source: get("source"), Target: get("target"), OrderingKey: q.Get("ordering_key"),
		PossibleDuplicate: get("possible_duplicate"), CreatedAfter: get("created_after"), CreatedBefore: get("created_before"),
		Type: get("type"), From: q.Get("from"), To: q.Get("to"), IdempotencyKey: q.Get("idempotency_key")}
	f := projection.MessageFilter{Source: form.Source, Target: form.Target, OrderingKey: form.OrderingKey, Type: form.Type,
		From: form.From, To: form.To, IdempotencyKey: form.IdempotencyKey, Limit: pageSize}
	var errs []error
	if form.Status != "" {
		s, err := lifecycle.ParseMessageStatus(form.Status)
		if err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: "status", Problem: err.Error()})
		}
		f.Status = s
	}
	if form.Source != "" {
		errs = append(errs, lifecycle.CheckName("source", form.Source))
	}
	if form.Target != "" {
		errs = append(errs, lifecycle.CheckName("target", form.Target))
	}
	errs = append(errs, lifecycle.CheckOrderingKey("ordering_key", form.OrderingKey))
	if form.Type != "" {
		errs = append(errs, lifecycle.CheckMessageType("type", form.Type))
	}
	for _, p := range []struct{ field, v string }{{"from", form.From}, {"to", form.To}, {"idempotency_key", form.IdempotencyKey}} {
		if p.v != "" {
			errs = append(errs, lifecycle.CheckParty(p.field, p.v))
		}
	}
	if v := form.PossibleDuplicate; v != "" {
		// As the API: only true keeps a filter; every message is either.
		if f.PossibleDuplicate = v == "true"; !f.PossibleDuplicate {
			errs = append(errs, &lifecycle.FieldError{Field: "possible_duplicate", Problem: fmt.Sprintf("%q: allowed is true", v)})
		}
	}
	var err error
	if form.CreatedAfter != "" {
		f.CreatedAfter, err = parseFormTime("created_after", form.CreatedAfter)
		errs = append(errs, err)
	}
	if form.CreatedBefore != "" {
		f.CreatedBefore, err = parseFormTime("created_before", form.CreatedBefore)
		errs = append(errs, err)
	}
	if v := get("cursor"); v != "" {
		cursor, err := projection.ParseCursor(v)
		errs = append(errs, err)
		f.After = &cursor
	}
	return f, form, invalid(errs...)
}

// The layouts of a time in a form: what a datetime-local input sends, in
// UTC as the console shows every time, or an RFC 3339 time with its zone.
var formLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", time.RFC3339}

// formTime is t as a form and the links write it.
func formTime(t time.Time) string { return t.UTC().Format(formLayouts[0]) }

func parseFormTime(field, v string) (time.Time, error) {
	for _, layout := range formLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, &lifecycle.FieldError{Field: field,
		Problem: "\"" + v + "\" is not a time: write it as 2026-12-01T08:00:00 (UTC) or in RFC 3339 with its zone"}
}
