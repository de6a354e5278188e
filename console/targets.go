package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// targetsView is the list of targets.
type targetsView struct {
	Targets []lifecycle.Target
}

// targets lists the targets by name.
func (c *Console) targets(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	ts, err := c.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "targets", page{Title: "Targets", Nav: "targets", View: targetsView{Targets: ts}})
	return nil
}

// targetView is one target's definition.
type targetView struct {
	Target lifecycle.Target
	// Config is the kind's configuration, indented.
	Config string
	// Messages is the list of its messages.
	Messages string
}

// target shows a target's definition.
func (c *Console) target(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := targetView{Target: t, Config: indent(t.Config), Messages: listURL(url.Values{"target": {t.Name}})}
	c.render(w, r, http.StatusOK, "target", page{Title: "Target " + t.Name, Nav: "targets", View: v})
	return nil
}

// findTarget is the target of that name; ErrNotFound when there is none.
func (c *Console) findTarget(ctx context.Context, name string) (lifecycle.Target, error) {
	if lifecycle.CheckName("name", name) == nil {
		ts, err := c.cfg.Writer.Targets(ctx)
		if err != nil {
			return lifecycle.Target{}, err
		}
		for _, t := range ts {
			if t.Name == name {
				return t, nil
			}
		}
	}
	return lifecycle.Target{}, fmt.Errorf("target %q: %w", name, commands.ErrNotFound)
}

// indent is a JSON object indented for reading; as it is when it is not
// JSON.
func indent(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// targetForm is a target's definition as the edit form holds it: each
// field named as the API names it.
type targetForm struct {
	Enabled                                            bool
	MaxConcurrent, AttemptTimeout                      string
	Strategy, BaseDelay, MaxDelay, Jitter, MaxAttempts string
	MaxAge, ReceiptTimeout, Config                     string
	OrderingMode, OnFailure, HeadAlertAfter            string
}

// editTargetView is the edit form of a target.
type editTargetView struct {
	Target lifecycle.Target
	Form   targetForm
	// The form's selects.
	Strategy, OrderingMode, OnFailure choice
	Problem                           *errorView
}

// choice is one select of a form, with the problems a refusal found in
// it.
type choice struct {
	field
	Options []option
}

// choiceOf is the select of field name, offering values, value selected.
func choiceOf[T ~string](name, label, value, hint string, values []T, problem *errorView) choice {
	c := choice{field: fieldOf(name, label, value, hint, problem)}
	for _, v := range values {
		c.Options = append(c.Options, option{Value: string(v), Label: string(v), Selected: string(v) == value})
	}
	return c
}

// formOf fills the form with a target's definition.
func formOf(t lifecycle.Target) targetForm {
	f := targetForm{Enabled: t.Enabled, MaxConcurrent: strconv.Itoa(t.MaxConcurrent),
		AttemptTimeout: t.AttemptTimeout.String(), Strategy: string(t.Retry.Strategy),
		BaseDelay: t.Retry.BaseDelay.String(), MaxDelay: t.Retry.MaxDelay.String(),
		MaxAttempts: strconv.Itoa(t.Retry.MaxAttempts), MaxAge: t.Retry.MaxAge.String(), Config: indent(t.Config)}
	if t.Retry.Jitter != nil {
		f.Jitter = strconv.FormatFloat(*t.Retry.Jitter, 'g', -1, 64)
	}
	if t.Receipt != nil {
		f.ReceiptTimeout = t.Receipt.Timeout.String()
	}
	o := t.Ordering.WithDefaults()
	f.OrderingMode, f.OnFailure = string(o.Mode), string(o.OnFailure)
	if o.HeadAlertAfter != 0 {
		f.HeadAlertAfter = o.HeadAlertAfter.String()
	}
	return f
}

// readTargetForm reads the edit form.
func readTargetForm(form url.Values) targetForm {
	get := func(name string) string { return strings.TrimSpace(form.Get(name)) }
	return targetForm{Enabled: form.Get("enabled") == "on", MaxConcurrent: get("max_concurrent"),
		AttemptTimeout: get("attempt_timeout"), Strategy: get("retry.strategy"), BaseDelay: get("retry.base_delay"),
		MaxDelay: get("retry.max_delay"), Jitter: get("retry.jitter"), MaxAttempts: get("retry.max_attempts"),
		MaxAge: get("retry.max_age"), ReceiptTimeout: get("receipt.timeout"), Config: form.Get("config"),
		OrderingMode: get("ordering.mode"), OnFailure: get("ordering.on_failure"), HeadAlertAfter: get("ordering.head_alert_after")}
}

// definition is the target the form describes, as a PUT of the API would
// carry it: a field left empty takes its default, the receipt timeout
// left empty means no receipt, the head alert left empty none. A value that cannot be read is a
// *lifecycle.FieldError named as the API names the field.
func (f targetForm) definition(name, kind string) (lifecycle.Target, error) {
	t := lifecycle.Target{Name: name, Kind: kind, Enabled: f.Enabled, Config: json.RawMessage(f.Config),
		Retry:    lifecycle.RetryPolicy{Strategy: lifecycle.RetryStrategy(f.Strategy)},
		Ordering: lifecycle.Ordering{Mode: lifecycle.OrderingMode(f.OrderingMode), OnFailure: lifecycle.OnFailure(f.OnFailure)}}
	var errs []error
	whole := func(field, v string, into *int) {
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: field, Problem: fmt.Sprintf("must be a whole number, not %q", v)})
		}
		*into = n
	}
	dur := func(field, v string, into *lifecycle.Duration) {
		if v == "" {
			return
		}
		if err := into.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: field, Problem: err.Error()})
		}
	}
	whole("max_concurrent", f.MaxConcurrent, &t.MaxConcurrent)
	dur("attempt_timeout", f.AttemptTimeout, &t.AttemptTimeout)
	dur("retry.base_delay", f.BaseDelay, &t.Retry.BaseDelay)
	dur("retry.max_delay", f.MaxDelay, &t.Retry.MaxDelay)
	whole("retry.max_attempts", f.MaxAttempts, &t.Retry.MaxAttempts)
	dur("retry.max_age", f.MaxAge, &t.Retry.MaxAge)
	dur("ordering.head_alert_after", f.HeadAlertAfter, &t.Ordering.HeadAlertAfter)
	if f.Jitter != "" {
		j, err := strconv.ParseFloat(f.Jitter, 64)
		if err != nil {
			errs = append(errs, &lifecycle.FieldError{Field: "retry.jitter", Problem: fmt.Sprintf("must be a number, not %q", f.Jitter)})
		}
		t.Retry.Jitter = &j
	}
	if f.ReceiptTimeout != "" {
		t.Receipt = &lifecycle.ReceiptPolicy{}
		dur("receipt.timeout", f.ReceiptTimeout, &t.Receipt.Timeout)
	}
	if strings.TrimSpace(f.Config) == "" {
		t.Config = nil
	} else if !json.Valid(t.Config) {
		errs = append(errs, &lifecycle.FieldError{Field: "config", Problem: "must be a JSON object"})
	}
	return t, invalid(errs...)
}

// editTarget shows a target's edit form, and saves it (PUT
// /targets/{name}): the whole definition is replaced, its kind kept.
func (c *Console) editTarget(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := editTargetView{Target: t, Form: formOf(t)}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		v.Form = readTargetForm(r.PostForm)
		next, err := v.Form.definition(t.Name, t.Kind)
		if err == nil {
			_, err = c.cfg.Writer.UpdateTarget(r.Context(), next, journal.OperatorActor(s.Name))
		}
		if err == nil {
			c.configChanged()
			c.log.Info("target updated", "target", t.Name, "enabled", next.Enabled, "operator", s.Name, "via", "console")
			c.done(w, r, "/ui/targets/"+t.Name, "Target "+t.Name+" saved.")
			return nil
		}
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		v.Problem, status = &p, p.Status
	}
	v.Strategy = choiceOf("retry.strategy", "Retry strategy", v.Form.Strategy, "How the wait grows from one attempt to the next.",
		lifecycle.RetryStrategies, v.Problem)
	v.OrderingMode = choiceOf("ordering.mode", "Ordering", v.Form.OrderingMode,
		"fifo: the deliveries of one ordering key go one at a time, in order; none: all in parallel.", lifecycle.OrderingModes, v.Problem)
	v.OnFailure = choiceOf("ordering.on_failure", "When a lane's head fails for good", v.Form.OnFailure,
		"block: the lane waits until an operator redelivers or skips the head; continue: the next goes.", lifecycle.OnFailures, v.Problem)
	c.render(w, r, status, "target_edit", page{Title: "Edit target " + t.Name, Nav: "targets", View: v})
	return nil
}

// enableTarget asks, then enables or disables a target, as the path ends:
// a PUT of its definition with enabled changed.
func (c *Console) enableTarget(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	enable := strings.HasSuffix(r.URL.Path, "/enable")
	v := confirmView{Back: "/ui/targets/" + t.Name}
	if enable {
		v.Question, v.Button = "Enable target "+t.Name+"?", "Enable"
		v.Explanation = "Its workers claim its deliveries again, the stalled ones included."
	} else {
		v.Question, v.Button, v.Danger = "Disable target "+t.Name+"?", "Disable", true
		v.Explanation = "It claims nothing while disabled. Its deliveries are woken until the settings' max_dispatches runs out, then they stall until it is enabled again."
	}
	return c.confirm(w, r, v.Button+" "+t.Name, v, func() (string, error) {
		t.Enabled = enable
		if _, err := c.cfg.Writer.UpdateTarget(r.Context(), t, journal.OperatorActor(s.Name)); err != nil {
			return "", err
		}
		c.configChanged()
		c.log.Info("target updated", "target", t.Name, "enabled", enable, "operator", s.Name, "via", "console")
		if enable {
			return "Target " + t.Name + " is enabled.", nil
		}
		return "Target " + t.Name + " is disabled.", nil
	})
}
