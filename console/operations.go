package console

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// drySample is how many of the messages an operation would take its
// confirmation lists, as the API's dry run.
const drySample = 20

// operationsView is a page of the operations list, newest first.
type operationsView struct {
	Operations []*projection.Operation
	// Next is the next page, First the first; "" when there is none or
	// this is it.
	Next, First string
}

// operations shows a page of the bulk operations (GET /operations).
func (c *Console) operations(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	var after *projection.OperationCursor
	if v := r.URL.Query().Get("cursor"); v != "" {
		cursor, err := projection.ParseOperationCursor(v)
		if err != nil {
			return invalid(err)
		}
		after = &cursor
	}
	ops, next, err := projection.ListOperations(r.Context(), c.cfg.DB, pageSize, after)
	if err != nil {
		return err
	}
	v := operationsView{Operations: ops}
	if next != nil {
		v.Next = "/ui/operations?" + url.Values{"cursor": {next.String()}}.Encode()
	}
	if after != nil {
		v.First = "/ui/operations"
	}
	c.render(w, r, http.StatusOK, "operations", page{Title: "Operations", Nav: "operations", View: v})
	return nil
}

// operationForm is a bulk operation as its form holds it. The inputs are
// named as the API's fields, so a refusal's problems land on them.
type operationForm struct {
	Action, Target, Source, CreatedAfter, CreatedBefore, Reason string
	Status                                                      []string
}

// operationFormOf reads the form from a query or a posted form.
func operationFormOf(q url.Values) operationForm {
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	return operationForm{Action: get("action"), Target: get("filter.target"), Source: get("filter.source"),
		CreatedAfter: get("filter.created_after"), CreatedBefore: get("filter.created_before"), Reason: get("reason"),
		Status: q["filter.status"]}
}

// values are the form's fields that are set, as a query or hidden inputs.
func (f operationForm) values() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"action": f.Action, "filter.target": f.Target, "filter.source": f.Source,
		"filter.created_after": f.CreatedAfter, "filter.created_before": f.CreatedBefore, "reason": f.Reason} {
		if v != "" {
			q.Set(name, v)
		}
	}
	for _, s := range f.Status {
		q.Add("filter.status", s)
	}
	return q
}

// spec is the operation the form asks for, checked as the API checks it.
func (f operationForm) spec() (commands.OperationSpec, error) {
	spec := commands.OperationSpec{Action: lifecycle.OperationAction(f.Action), Reason: f.Reason,
		Filter: lifecycle.OperationFilter{Target: f.Target, Source: f.Source}}
	for _, s := range f.Status {
		spec.Filter.Status = append(spec.Filter.Status, lifecycle.MessageStatus(s))
	}
	var errs []error
	var err error
	if f.CreatedAfter != "" {
		spec.Filter.CreatedAfter, err = parseFormTime("filter.created_after", f.CreatedAfter)
		errs = append(errs, err)
	}
	if f.CreatedBefore != "" {
		spec.Filter.CreatedBefore, err = parseFormTime("filter.created_before", f.CreatedBefore)
		errs = append(errs, err)
	}
	if err := invalid(errs...); err != nil {
		return spec, err
	}
	return commands.CheckOperation(spec)
}

// newOperationView is the form of a bulk operation and, once it was
// counted, what the operation would take.
type newOperationView struct {
	Form     operationForm
	Action   choice
	Statuses checks
	Targets  []lifecycle.Target
	Problem  *errorView
	// Counted is set once the form was counted without a problem: the
	// page then asks to start the operation. Dry is what it would do, as
	// the API's dry run answers it.
	Counted bool
	Dry     httpapi.DryRun
	// Hidden is the counted form, which the confirmation posts.
	Hidden url.Values
}

// actionHint says what each action does to a message.
const actionHint = "redeliver: queue again each failed or stalled delivery of the current generation; " +
	"skip: skip each delivery of the current generation that waits or failed; " +
	"resend: a new generation to the targets of the current one; " +
	"replay: a new generation to the targets the routes match now."

// newOperation shows the form of a bulk operation. Counting it (a GET with
// an action) is the API's dry run: how many messages it would take, act
// on and refuse (by code), and the first of them, changing nothing; then
// it asks to start it; starting it posts the counted
// form (POST /operations), and leads to its page.
func (c *Console) newOperation(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	form := operationFormOf(r.URL.Query())
	if r.Method == http.MethodPost {
		form = operationFormOf(r.PostForm)
	}
	targets, err := c.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	v := newOperationView{Form: form, Targets: targets}
	status := http.StatusOK
	problem := func(err error) error {
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		v.Problem, status = &p, p.Status
		return nil
	}
	switch spec, err := form.spec(); {
	case form.Action == "" && r.Method != http.MethodPost:
		// The form as a link filled it, not yet counted.
	case err != nil:
		if err := problem(err); err != nil {
			return err
		}
	case r.Method == http.MethodPost:
		o, err := c.cfg.Writer.CreateOperation(r.Context(), spec, s.Name)
		if err == nil {
			if c.cfg.OnOperation != nil {
				c.cfg.OnOperation()
			}
			c.log.Info("bulk operation created", "operation_id", o.ID, "action", o.Action, "matched", o.Matched,
				"operator", s.Name, "via", "console")
			c.done(w, r, "/ui/operations/"+o.ID.String(), fmt.Sprintf("Operation started: it takes %s.", messageCount(o.Matched)))
			return nil
		}
		if err := problem(err); err != nil {
			return err
		}
	default:
		pv, err := c.cfg.Writer.PreviewOperation(r.Context(), spec, s.Name, drySample)
		if err == nil {
			v.Dry, v.Counted, v.Hidden = httpapi.DryRunOf(pv), true, form.values()
		} else if err := problem(err); err != nil {
			return err
		}
	}
	v.Action = choiceOf("action", "Action", form.Action, actionHint, lifecycle.OperationActions, v.Problem)
	v.Statuses = checks{Name: "filter.status", Legend: "Status", Hint: "Messages in any of the statuses chosen; none chosen leaves status out."}
	for _, st := range lifecycle.MessageStatuses {
		v.Statuses.Options = append(v.Statuses.Options, option{Value: string(st), Label: st.Label(),
			Selected: slices.Contains(form.Status, string(st))})
	}
	if v.Problem != nil {
		for _, f := range v.Problem.Fields {
			if strings.HasPrefix(f.Field, "filter.status") {
				v.Statuses.Problems = append(v.Statuses.Problems, f.Problem)
			}
		}
	}
	c.render(w, r, status, "operation_new", page{Title: "New operation", Nav: "operations", View: v})
	return nil
}

// operationView is one operation, its progress and its refusals.
type operationView struct {
	*projection.Operation
	// Rate and ETA are measured over its latest batches while it runs;
	// zero until it has taken some.
	Rate float64
	ETA  time.Duration
	// Refusals is a page of its refusals, in the order it met them;
	// NextRefusals the next page.
	Refusals     []projection.RefusalAt
	NextRefusals string
	// Self is the page's own address, which its live part reloads.
	Self string
}

// Running reports whether the operation may still move.
func (v operationView) Running() bool { return v.State == lifecycle.OperationRunning }

// Percent is how much of the operation is taken, rounded down, for a
// person.
func (v operationView) Percent() int {
	if v.Matched == 0 {
		return 100
	}
	return v.Next() * 100 / v.Matched
}

// messageCount is n messages in words.
func messageCount(n int) string {
	if n == 1 {
		return "1 message"
	}
	return count(n) + " messages"
}

// operationTone is the badge colour of an operation's state, by the rule
// of statusTone.
func operationTone(s lifecycle.OperationState) string {
	switch s {
	case lifecycle.OperationDone:
		return "ok"
	case lifecycle.OperationFailed:
		return "bad"
	case lifecycle.OperationCancelled:
		return "warn"
	}
	return "info"
}

// filterText is an operation's filter in words.
func filterText(f lifecycle.OperationFilter) string {
	var parts []string
	if len(f.Status) > 0 {
		labels := make([]string, len(f.Status))
		for i, s := range f.Status {
			labels[i] = s.Label()
		}
		parts = append(parts, "status "+strings.Join(labels, " or "))
	}
	if f.Target != "" {
		parts = append(parts, "a delivery to "+f.Target)
	}
	if f.Source != "" {
		parts = append(parts, "source "+f.Source)
	}
	if !f.CreatedAfter.IsZero() {
		parts = append(parts, "created after "+stamp(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		parts = append(parts, "created before "+stamp(f.CreatedBefore))
	}
	return strings.Join(parts, "; ")
}

// operation shows one operation (GET /operations/{id} and its refusals).
// While it runs, its progress reloads every second.
func (c *Console) operation(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	o, err := c.loadOperation(r)
	if err != nil {
		return err
	}
	var after projection.RefusalAt
	if v := r.URL.Query().Get("refusals"); v != "" {
		if after, err = projection.ParseRefusalAt(v); err != nil {
			return invalidField("refusals", "is not a place in the refusals: follow the page's link")
		}
	}
	v := operationView{Operation: o, Self: r.URL.RequestURI()}
	if v.Running() {
		if v.Rate, err = projection.RecentRate(r.Context(), c.cfg.DB, o); err != nil {
			return err
		}
		if v.Rate > 0 {
			v.ETA = time.Duration(math.Ceil(float64(o.Matched-o.Next())/v.Rate)) * time.Second
		}
	}
	refusals, err := projection.Refusals(r.Context(), c.cfg.DB, o.ID, after, pageSize+1)
	if err != nil {
		return err
	}
	if len(refusals) > pageSize {
		last := refusals[pageSize-1]
		refusals = refusals[:pageSize]
		v.NextRefusals = "/ui/operations/" + o.ID.String() + "?" + url.Values{"refusals": {last.String()}}.Encode()
	}
	v.Refusals = refusals
	c.render(w, r, http.StatusOK, "operation", page{Title: "Operation " + o.ID.String(), Nav: "operations", View: v})
	return nil
}

// cancelOperation asks why, then stops a running operation before its
// next batch (POST /operations/{id}/cancel).
func (c *Console) cancelOperation(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	o, err := c.loadOperation(r)
	if err != nil {
		return err
	}
	reason := reasonField(r)
	v := confirmView{
		Question: fmt.Sprintf("Cancel operation %s?", o.ID),
		Explanation: fmt.Sprintf("It stops before its next batch; what it did stays done. So far it has taken %s of %s messages.",
			count(o.Next()), count(o.Matched)),
		Button: "Cancel the operation",
		Danger: true,
		Back:   "/ui/operations/" + o.ID.String(),
		Fields: []field{reason},
	}
	return c.confirm(w, r, "Cancel", v, func() (string, error) {
		after, err := c.cfg.Writer.CancelOperation(r.Context(), o.ID, s.Name, reason.Value)
		if err != nil {
			return "", err
		}
		c.log.Info("bulk operation cancelled", "operation_id", o.ID, "done", after.Done, "refused", after.Refused,
			"operator", s.Name, "via", "console")
		return fmt.Sprintf("Operation cancelled after %s of %s.", count(after.Next()), messageCount(after.Matched)), nil
	})
}

// loadOperation is the operation the path names.
func (c *Console) loadOperation(r *http.Request) (*projection.Operation, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	return projection.LoadOperation(r.Context(), c.cfg.DB, id)
}

// bulkLink is the form of a bulk operation on the messages the list's
// filter chooses, "" when an operation cannot choose the same messages:
// none is set, or one an operation's filter lacks.
func bulkLink(f filterForm) string {
	if f.OrderingKey != "" || f.PossibleDuplicate != "" || f.Type != "" || f.From != "" || f.To != "" || f.IdempotencyKey != "" {
		return ""
	}
	q := url.Values{}
	for name, v := range map[string]string{"filter.status": f.Status, "filter.source": f.Source, "filter.target": f.Target,
		"filter.created_after": f.CreatedAfter, "filter.created_before": f.CreatedBefore} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "/ui/operations/new?" + q.Encode()
}
