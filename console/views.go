package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

//go:embed templates static
var files embed.FS

// The templates: layout.html holds the page around every view,
// partials.html the pieces several views and the live history share, and
// each other file one view, which defines "content".
const (
	layoutFile   = "templates/layout.html"
	partialsFile = "templates/partials.html"
)

// views are the parsed templates, one set per view, and the version of
// each static file for its links.
type views struct {
	pages    map[string]*template.Template
	versions map[string]string
}

// parseViews parses every view with the layout and the partials.
func parseViews() (*views, error) {
	v := &views{pages: map[string]*template.Template{}, versions: map[string]string{}}
	err := fs.WalkDir(files, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		v.versions[strings.TrimPrefix(name, "static/")] = hex.EncodeToString(sum[:6])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read static files: %w", err)
	}
	base, err := template.New("").Funcs(v.funcs()).ParseFS(files, layoutFile, partialsFile)
	if err != nil {
		return nil, fmt.Errorf("parse templates: %w", err)
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if name == layoutFile || name == partialsFile {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(files, name)
		if err != nil {
			return nil, fmt.Errorf("parse templates: %w", err)
		}
		v.pages[strings.TrimSuffix(path.Base(name), ".html")] = t
	}
	return v, nil
}

// page is what the layout shows around a view.
type page struct {
	Title string
	// Nav names the bar's item of the page: dashboard, messages,
	// sources, targets, routes, operations, settings or tokens.
	Nav     string
	Session *auth.Session
	// Notice is what the last action did, shown once.
	Notice string
	// View is the view's own data.
	View any
}

// CSRF is the value every form of the page carries.
func (p page) CSRF() string {
	if p.Session == nil {
		return ""
	}
	return p.Session.CSRF
}

// CanAdminister reports whether the page shows actions: only to a role
// that may take them.
func (p page) CanAdminister() bool {
	return p.Session != nil && p.Session.Role.Allows(auth.Administer)
}

// render answers the view with the status, inside the layout.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, view string, p page) {
	if p.Session == nil {
		p.Session, _ = r.Context().Value(sessionKey{}).(*auth.Session)
	}
	if notice, err := r.Cookie(noticeCookie); err == nil && r.Header.Get("HX-Request") == "" {
		p.Notice, _ = url.QueryUnescape(notice.Value)
		c.clearCookie(w, r, noticeCookie, Prefix)
	}
	c.write(w, status, view, "layout", p)
}

// write answers the template name of view with the status.
func (c *Console) write(w http.ResponseWriter, status int, view, name string, data any) {
	var buf bytes.Buffer
	if err := c.views.pages[view].ExecuteTemplate(&buf, name, data); err != nil {
		c.log.Error("console: render", "view", view, "template", name, "err", err)
		http.Error(w, "internal error; the server's log has the cause", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// errorView is the error page: the API's answer to what went wrong.
type errorView struct {
	Status  int
	Message string
	Fields  []httpapi.FieldProblem
}

// Heading is the page's title for the status.
func (e errorView) Heading() string {
	switch e.Status {
	case http.StatusNotFound:
		return "Not found"
	case http.StatusForbidden:
		return "Not allowed"
	case http.StatusUnauthorized:
		return "Signed out"
	case http.StatusConflict:
		return "Refused"
	case http.StatusPreconditionFailed:
		return "Changed"
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "Not valid"
	case http.StatusServiceUnavailable:
		return "Unavailable"
	}
	return "Something went wrong"
}

// problemOf is the API's answer to err, for a page to show.
func problemOf(err error) errorView {
	if errors.Is(err, errStaleForm) {
		return errorView{Status: http.StatusForbidden, Message: err.Error()}
	}
	status, body := httpapi.Refusal(err)
	v := errorView{Status: status, Message: body.Message, Fields: body.Details.Errors}
	var stale *commands.StaleError
	if errors.As(err, &stale) {
		// The API's words name versions; a person wants to know that what
		// they looked at is not what is there now.
		v.Message = fmt.Sprintf("This message changed since you opened it (you saw version %d; it is at version %d now): "+
			"look again. Nothing was done.", stale.Want, stale.Current)
	}
	if len(v.Fields) == 0 && body.Details.Field != "" && body.Code == httpapi.CodeInvalidField {
		v.Fields = []httpapi.FieldProblem{{Field: body.Details.Field, Problem: body.Details.Problem}}
	}
	var exists *commands.ExistsError
	if errors.As(err, &exists) {
		// A taken name is the name field's problem: shown beside it.
		v.Fields = []httpapi.FieldProblem{{Field: exists.Field, Problem: "is taken: another " + exists.Kind + " has it"}}
	}
	if status == http.StatusNotFound {
		// The API's words name ids and paths; a person wants to know what
		// is missing and where to go.
		v.Message = "There is nothing here: the message, delivery, source, target or route may never have existed, or was deleted " +
			"(a settled message leaves once its retention period has passed)."
	}
	return v
}

// fail answers err with the error page; causes on our side are logged.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *auth.Session, err error) {
	v := problemOf(err)
	if v.Status >= 500 {
		if r.Context().Err() != nil {
			c.log.Debug("console request ended early", "method", r.Method, "path", r.URL.Path, "err", err)
		} else {
			c.log.Error("console request failed", "method", r.Method, "path", r.URL.Path, "status", v.Status, "err", err)
		}
	}
	c.render(w, r, v.Status, "error", page{Title: v.Heading(), Session: s, View: v})
}

// invalidField is one wrong input, as the commands report it.
func invalidField(field, problem string) error {
	return invalid(&lifecycle.FieldError{Field: field, Problem: problem})
}

// invalid joins input problems in commands.ErrInvalid; nil for none.
func invalid(errs ...error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", commands.ErrInvalid, err)
	}
	return nil
}

// stamp is how the console writes a time, on every page and in every
// notice: RFC 3339 in UTC, to the second (2026-12-05T19:02:03Z); "—" for
// none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format(time.RFC3339)
}

// funcs are the templates' functions.
func (v *views) funcs() template.FuncMap {
	return template.FuncMap{
		"asset": func(name string) string {
			return "/ui/static/" + name + "?v=" + v.versions[name]
		},
		"when":          stamp,
		"count":         count[int64],
		"countInt":      count[int],
		"size":          size,
		"duration":      duration,
		"statusTone":    statusTone,
		"stateTone":     stateTone,
		"operationTone": operationTone,
		"healthTone":    healthTone,
		"healthLabel":   healthLabel,
		"healthNote":    healthNote,
		"filterText":    filterText,
		"operator":      journal.OperatorName,
		"redelivery":    redeliveryLabel,
		"skippable":     lifecycle.SkipRule.Admits,
		"resendable":    func(m *projection.Message) bool { return commands.Resendable(m) == nil },
		"known":         func(id uuid.UUID) bool { return id != uuid.Nil },
		"nextAttempt":   nextAttempt,
		"short":         short,
		"problemsFor":   problemsFor,
		"fieldOf":       fieldOf,
		"join":          strings.Join,
	}
}

// count writes n with thousands separators.
func count[N int | int64](n N) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// size writes a number of bytes as a person reads it.
func size(n int64) string {
	switch {
	case n < 1<<10:
		return count(n) + " bytes"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB (%s bytes)", float64(n)/(1<<10), count(n))
	}
	return fmt.Sprintf("%.1f MiB (%s bytes)", float64(n)/(1<<20), count(n))
}

// duration writes d to the second, or to the millisecond below one.
func duration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// statusTone is the badge colour of a message status: ok when done, bad
// when it failed or was refused, warn when it waits for something to
// change, info while Waybill works on it.
func statusTone(s lifecycle.MessageStatus) string {
	switch s {
	case lifecycle.StatusDelivered:
		return "ok"
	case lifecycle.StatusError, lifecycle.StatusRefused:
		return "bad"
	case lifecycle.StatusRetrying, lifecycle.StatusStalled, lifecycle.StatusBlocked:
		return "warn"
	case lifecycle.StatusReceived, lifecycle.StatusScheduled, lifecycle.StatusInProgress, lifecycle.StatusAwaitingReceipt:
		return "info"
	}
	return "neutral"
}

// healthTone is the badge colour of a target's health state: ok while its
// attempts go, bad while its breaker holds them, warn while a probe or a
// receiver's hold decides, neutral while an operator or the health keep it
// disabled.
func healthTone(s lifecycle.HealthState) string {
	switch s {
	case lifecycle.HealthClosed:
		return "ok"
	case lifecycle.HealthOpen:
		return "bad"
	case lifecycle.HealthHalfOpen, lifecycle.HealthThrottled:
		return "warn"
	}
	return "neutral"
}

// healthLabel names a target's health state as the badge shows it.
func healthLabel(s lifecycle.HealthState) string {
	switch s {
	case lifecycle.HealthClosed:
		return "Healthy"
	case lifecycle.HealthOpen:
		return "Breaker open"
	case lifecycle.HealthHalfOpen:
		return "Breaker half-open"
	case lifecycle.HealthThrottled:
		return "Throttled"
	case lifecycle.HealthDisabled:
		return "Disabled"
	}
	return string(s)
}

// healthNote is what the badge of h's state leaves out: until when, the
// window's failure rate, since when every attempt failed, how many
// deliveries wait.
func healthNote(h lifecycle.Health) string {
	var parts []string
	switch h.State {
	case lifecycle.HealthOpen:
		parts = append(parts, "until "+stamp(h.Until)+", then one probe")
	case lifecycle.HealthHalfOpen:
		parts = append(parts, "one probe may go")
	case lifecycle.HealthThrottled:
		parts = append(parts, "by its receiver until "+stamp(h.Until))
	case lifecycle.HealthClosed:
		if h.FailureRate != nil && *h.FailureRate > 0 {
			parts = append(parts, fmt.Sprintf("%.0f %% of the window's attempts failed", *h.FailureRate*100))
		}
	}
	if !h.FailingSince.IsZero() {
		parts = append(parts, "every attempt failed since "+stamp(h.FailingSince))
	}
	if h.Held != nil && *h.Held > 0 {
		parts = append(parts, count(*h.Held)+" held")
	}
	return strings.Join(parts, "; ")
}

// stateTone is the badge colour of a delivery state, by the same rule.
func stateTone(s lifecycle.DeliveryState) string {
	switch s {
	case lifecycle.StateDelivered:
		return "ok"
	case lifecycle.StateFailed:
		return "bad"
	case lifecycle.StateRetrying, lifecycle.StateStalled, lifecycle.StateBlocked:
		return "warn"
	case lifecycle.StateScheduled, lifecycle.StateQueued, lifecycle.StateDelivering, lifecycle.StateAwaitingAck:
		return "info"
	}
	return "neutral"
}

// redeliveryLabel names the operator's action on a delivery in state s:
// "Send again" for a delivered or skipped one, "Redeliver" for the others
// it applies to, "" when it applies to none.
func redeliveryLabel(s lifecycle.DeliveryState) string {
	switch {
	case s == lifecycle.StateDelivered || s == lifecycle.StateSkipped:
		return "Send again"
	case lifecycle.RedeliverRule.Admits(s):
		return "Redeliver"
	}
	return ""
}

// short cuts a long text, such as an error, for a table's cell.
func short(s string) string {
	const most = 160
	if utf8.RuneCountInString(s) <= most {
		return s
	}
	return string([]rune(s)[:most-1]) + "…"
}

// field is one text input of a form.
type field struct {
	// Name is the input's name and id: the field's name in the API.
	Name, Label, Value, Hint string
	Problems                 []string
}

func fieldOf(name, label, value, hint string, problem *errorView) field {
	return field{Name: name, Label: label, Value: value, Hint: hint, Problems: problemsFor(name, problem)}
}

// problemsFor is the problems of one field among those of a refusal.
func problemsFor(field string, v *errorView) []string {
	if v == nil {
		return nil
	}
	var out []string
	for _, p := range v.Fields {
		if p.Field == field {
			out = append(out, p.Problem)
		}
	}
	return out
}
