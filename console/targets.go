package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/targets"
)

// targetsView is the list of targets and, for an admin, the form that
// adds one of a kind.
type targetsView struct {
	Targets []lifecycle.Target
	// Kinds are the kinds a target may be of, each with the link to its
	// form.
	Kinds []string
	// Add is the form of a new target, nil when none is asked for.
	Add *targetFormView
}

// targetFormView is a target's form: a new one's or an existing one's.
type targetFormView struct {
	Name, Kind string
	Form       targetForm
	// The form's selects.
	Strategy, OrderingMode, OnFailure choice
	Config                            configView
	Problem                           *errorView
}

// targets lists the targets by name; with ?add=<kind>, an admin gets the
// form of a new target of that kind under the list.
func (c *Console) targets(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	kind := r.URL.Query().Get("add")
	if kind == "" {
		return c.showTargets(w, r, http.StatusOK, nil)
	}
	if !s.Role.Allows(auth.Administer) {
		return httpapi.Forbidden(s.Role, auth.Administer)
	}
	k, err := targets.Lookup(kind)
	var fe *lifecycle.FieldError
	if errors.As(err, &fe) {
		return invalidField("add", fe.Problem)
	}
	t := lifecycle.Target{Kind: k.Name, Enabled: true}.WithDefaults()
	return c.showTargets(w, r, http.StatusOK, targetFormOf(t.Kind, formOf(t), nil))
}

func (c *Console) showTargets(w http.ResponseWriter, r *http.Request, status int, add *targetFormView) error {
	ts, err := c.cfg.Writer.Targets(r.Context())
	if err != nil {
		return err
	}
	v := targetsView{Targets: ts, Kinds: kindNames(targetKinds), Add: add}
	c.render(w, r, status, "targets", page{Title: "Targets", Nav: "targets", View: v})
	return nil
}

// createTarget adds the target of the form (POST /targets).
func (c *Console) createTarget(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	kind := strings.TrimSpace(r.PostForm.Get("kind"))
	f := readTargetForm(kind, r.PostForm)
	t, err := f.definition(kind)
	if err == nil {
		t, err = c.cfg.Writer.CreateTarget(r.Context(), t, journal.OperatorActor(s.Name))
	}
	if err != nil {
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		if _, ok := targetKinds[kind]; !ok {
			return err // no form to show it in: the kind was not one offered
		}
		return c.showTargets(w, r, p.Status, targetFormOf(kind, f, &p))
	}
	c.configChanged()
	c.log.Info("target created", "target", t.Name, "kind", t.Kind, "operator", s.Name, "via", "console")
	c.done(w, r, "/ui/targets/"+t.Name, "Target "+t.Name+" added.")
	return nil
}

// deleteTarget asks, then deletes a target (DELETE /targets/{name}); a
// target a route sends to is refused, as by the API.
func (c *Console) deleteTarget(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := confirmView{Question: "Delete target " + t.Name + "?", Button: "Delete", Danger: true, Back: "/ui/targets",
		Explanation: "No route may send to it: delete those first. Its deliveries and their history stay, " +
			"but nothing claims those still open; created again, it takes them up."}
	return c.confirm(w, r, "Delete "+t.Name, v, func() (string, error) {
		if err := c.cfg.Writer.DeleteTarget(r.Context(), t.Name, journal.OperatorActor(s.Name)); err != nil {
			return "", err
		}
		c.configChanged()
		c.log.Info("target deleted", "target", t.Name, "operator", s.Name, "via", "console")
		return "Target " + t.Name + " deleted.", nil
	})
}

// targetView is one target's definition.
type targetView struct {
	Target lifecycle.Target
	// Config is the kind's configuration, indented.
	Config string
	// Messages is the list of its messages.
	Messages string
	// Signing is how the target signs; nil for a kind that does not.
	Signing *signingView
	// Charts are its outcomes and its answers over time, as of At.
	Charts chartSet
	At     time.Time
}

// signingView is a target's signing scheme and the keys that sign now,
// oldest first: their ids, fingerprints and ages, never their material.
type signingView struct {
	Scheme string
	Keys   []keyView
}

// keyView is one signing key as the target page shows it.
type keyView struct {
	ID, Fingerprint string
	CreatedAt       time.Time
	Age             time.Duration
	// ExpiresAt is when a rotation's grace ends the key; zero: never.
	ExpiresAt time.Time
}

// target shows a target's definition: to a session that may not
// administer, with each header's value and the URL's password masked
// (redact.Target).
func (c *Console) target(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	if redact.Hides(s.Role) {
		t = redact.Target(t)
	}
	now := c.cfg.Now().UTC()
	shown, err := projection.WithHealth(r.Context(), c.cfg.DB, []lifecycle.Target{t}, now)
	if err != nil {
		return err
	}
	t = shown[0]
	minutes, err := readMinutes(r.Context(), c.cfg.DB, t.Name, now)
	if err != nil {
		return err
	}
	v := targetView{Target: t, Config: indent(t.Config), Messages: listURL(url.Values{"target": {t.Name}}),
		Charts: charts(minutes, now, "target-", true), At: now}
	if t.Signing != nil {
		v.Signing = &signingView{Scheme: t.Signing.Scheme}
		keys, err := c.targetKeys(r.Context(), t)
		if err != nil {
			return err
		}
		for _, k := range keys {
			v.Signing.Keys = append(v.Signing.Keys, keyView{ID: k.ID, Fingerprint: k.Fingerprint(), CreatedAt: k.CreatedAt,
				Age: now.Sub(k.CreatedAt).Truncate(time.Minute), ExpiresAt: k.ExpiresAt})
		}
	}
	c.render(w, r, http.StatusOK, "target", page{Title: "Target " + t.Name, Nav: "targets", View: v})
	return nil
}

// closeBreaker asks, then closes a target's breaker by hand (GET and POST
// /targets/{name}/health/close): its held deliveries go again.
func (c *Console) closeBreaker(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := confirmView{Back: "/ui/targets/" + t.Name, Question: "Close the breaker of target " + t.Name + "?", Button: "Close breaker",
		Explanation: "Its held deliveries go again at once, in their due order; the breaker opens again if they fail as before."}
	return c.confirm(w, r, v.Button+" of "+t.Name, v, func() (string, error) {
		if _, err := c.cfg.Writer.CloseBreaker(r.Context(), t.Name, journal.OperatorActor(s.Name)); err != nil {
			return "", err
		}
		c.log.Info("breaker closed by hand", "target", t.Name, "operator", s.Name, "via", "console")
		return "The breaker of target " + t.Name + " is closed.", nil
	})
}

// targetKeys are the keys that sign for t now; none when it does not sign.
func (c *Console) targetKeys(ctx context.Context, t lifecycle.Target) ([]targets.Key, error) {
	if !targets.Signs(t) {
		return nil, nil
	}
	return c.cfg.Writer.TargetKeys(ctx, t.Name)
}

// revealKeys asks, then shows an admin the keys of a target (GET and POST
// /targets/{name}/secret): the key itself is on the answer to the POST
// alone, so that no link, prefetch or history entry shows it.
func (c *Console) revealKeys(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	back := "/ui/targets/" + t.Name
	if r.Method != http.MethodPost {
		v := confirmView{Question: "Reveal the signing keys of " + t.Name + "?", Button: "Reveal", Back: back, Action: r.URL.Path,
			Explanation: "Whoever holds a key can sign as Waybill to this target's receiver. The keys are shown on this one answer, " +
				"and your name is logged."}
		c.render(w, r, http.StatusOK, "confirm", page{Title: "Reveal keys of " + t.Name, Nav: "targets", View: v})
		return nil
	}
	keys, err := c.targetKeys(r.Context(), t)
	if err != nil {
		return err
	}
	v := revealView{Target: t.Name, Back: back}
	for _, k := range keys {
		v.Keys = append(v.Keys, revealedKey{ID: k.ID, Scheme: k.Scheme, Secret: k.SecretText(), Public: k.PublicText()})
	}
	c.log.Info("target keys revealed", "target", t.Name, "operator", s.Name, "via", "console")
	c.render(w, r, http.StatusOK, "target_secret", page{Title: "Keys of " + t.Name, Nav: "targets", View: v})
	return nil
}

// rotateKey asks for a grace, then gives a target a new signing key
// (GET and POST /targets/{name}/secret/rotate); the keys that sign now go
// on signing beside it until the grace ends.
func (c *Console) rotateKey(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	grace := field{Name: "grace", Label: "Grace", Value: commands.DefaultKeyGrace.String(),
		Hint: "How long the keys that sign now go on signing beside the new one: from 0s to 168h (7 days)."}
	if r.Method == http.MethodPost {
		grace.Value = strings.TrimSpace(r.PostForm.Get("grace"))
	}
	v := confirmView{Question: "Rotate the signing key of " + t.Name + "?", Button: "Rotate", Back: "/ui/targets/" + t.Name,
		Fields: []field{grace},
		Explanation: "A new key signs every attempt from now on. Give it to the receiver (Reveal) before the grace ends: " +
			"after it, only the new key signs."}
	return c.confirm(w, r, "Rotate the key of "+t.Name, v, func() (string, error) {
		var d lifecycle.Duration
		if err := d.UnmarshalText([]byte(grace.Value)); err != nil {
			return "", invalidField("grace", err.Error())
		}
		k, err := c.cfg.Writer.RotateTargetKey(r.Context(), t.Name, d.D(), "", journal.OperatorActor(s.Name))
		if err != nil {
			return "", err
		}
		c.configChanged()
		c.log.Info("target key rotated", "target", t.Name, "key", k.ID, "grace", d.D(), "operator", s.Name, "via", "console")
		return "Key " + k.ID + " signs for " + t.Name + " from now on.", nil
	})
}

// revealView is the page of a target's revealed keys.
type revealView struct {
	Target, Back string
	Keys         []revealedKey
}

// revealedKey is one key as an admin who asked for it sees it: the
// secret (whsec_ or whsk_), and an ed25519 key's public half (whpk_).
type revealedKey struct {
	ID, Scheme, Secret, Public string
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

// targetForm is a target's definition as its form holds it: each field
// named as the API names it.
type targetForm struct {
	Name    string
	Enabled bool
	// EnabledWas is Enabled as the edit form was shown: a save that
	// leaves the box as it was keeps the target's enabled as it is when
	// written, so a disabling since (a 410, disable_after) stands.
	EnabledWas                                         bool
	MaxConcurrent, Slots, AttemptTimeout               string
	RatePerSecond, RateBurst                           string
	Strategy, BaseDelay, MaxDelay, Jitter, MaxAttempts string
	MaxAge, ReceiptTimeout                             string
	OrderingMode, OnFailure, HeadAlertAfter            string
	Transform                                          string
	// Config is the kind's configuration, field by field.
	Config configValues
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
	f := targetForm{Name: t.Name, Enabled: t.Enabled, EnabledWas: t.Enabled,
		AttemptTimeout: t.AttemptTimeout.String(), Strategy: string(t.Retry.Strategy),
		BaseDelay: t.Retry.BaseDelay.String(), MaxDelay: t.Retry.MaxDelay.String(),
		MaxAttempts: strconv.Itoa(t.Retry.MaxAttempts), MaxAge: t.Retry.MaxAge.String(),
		Config: valuesOf(targetKinds[t.Kind], t.Config), Transform: t.Transform}
	if t.MaxConcurrent > 0 {
		f.MaxConcurrent = strconv.Itoa(t.MaxConcurrent)
	}
	if t.Slots > 0 {
		f.Slots = strconv.Itoa(t.Slots)
	}
	if t.Retry.Jitter != nil {
		f.Jitter = strconv.FormatFloat(*t.Retry.Jitter, 'g', -1, 64)
	}
	if t.Receipt != nil {
		f.ReceiptTimeout = t.Receipt.Timeout.String()
	}
	if t.Rate != nil {
		f.RatePerSecond, f.RateBurst = strconv.FormatFloat(t.Rate.PerSecond, 'g', -1, 64), strconv.Itoa(t.Rate.Burst)
	}
	o := t.Ordering.WithDefaults()
	f.OrderingMode, f.OnFailure = string(o.Mode), string(o.OnFailure)
	if o.HeadAlertAfter != 0 {
		f.HeadAlertAfter = o.HeadAlertAfter.String()
	}
	return f
}

// readTargetForm reads the form of a target of the kind.
func readTargetForm(kind string, form url.Values) targetForm {
	get := func(name string) string { return strings.TrimSpace(form.Get(name)) }
	return targetForm{Name: get("name"), Enabled: form.Get("enabled") == "on", EnabledWas: form.Get("enabled_was") == "on",
		MaxConcurrent: get("max_concurrent"), Slots: get("slots"),
		AttemptTimeout: get("attempt_timeout"), Strategy: get("retry.strategy"), BaseDelay: get("retry.base_delay"),
		MaxDelay: get("retry.max_delay"), Jitter: get("retry.jitter"), MaxAttempts: get("retry.max_attempts"),
		MaxAge: get("retry.max_age"), ReceiptTimeout: get("receipt.timeout"), Config: readValues(targetKinds[kind], form),
		OrderingMode: get("ordering.mode"), OnFailure: get("ordering.on_failure"), HeadAlertAfter: get("ordering.head_alert_after"),
		Transform: get("transform"), RatePerSecond: get("rate.per_second"), RateBurst: get("rate.burst")}
}

// definition is the target of the kind the form describes, as a POST or
// PUT of the API would carry it: a field left empty takes its default,
// the receipt timeout left empty means no receipt, the head alert left
// empty none. A value that cannot be read is a *lifecycle.FieldError named
// as the API names the field.
func (f targetForm) definition(kind string) (lifecycle.Target, error) {
	t := lifecycle.Target{Name: f.Name, Kind: kind, Enabled: f.Enabled, Transform: f.Transform,
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
	whole("slots", f.Slots, &t.Slots)
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
	if f.RatePerSecond != "" || f.RateBurst != "" {
		t.Rate = &lifecycle.Rate{}
		if n, err := strconv.ParseFloat(f.RatePerSecond, 64); err == nil || f.RatePerSecond == "" {
			t.Rate.PerSecond = n
		} else {
			errs = append(errs, &lifecycle.FieldError{Field: "rate.per_second", Problem: fmt.Sprintf("must be a number, not %q", f.RatePerSecond)})
		}
		whole("rate.burst", f.RateBurst, &t.Rate.Burst)
	}
	if f.ReceiptTimeout != "" {
		t.Receipt = &lifecycle.ReceiptPolicy{}
		dur("receipt.timeout", f.ReceiptTimeout, &t.Receipt.Timeout)
	}
	config, err := f.Config.config(targetKinds[kind])
	if err != nil {
		errs = append(errs, err)
	}
	t.Config = config
	return t, invalid(errs...)
}

// editTarget shows a target's edit form, and saves it (PUT
// /targets/{name}): the whole definition is replaced, its kind kept.
func (c *Console) editTarget(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	t, err := c.findTarget(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	if r.Method != http.MethodPost {
		c.render(w, r, http.StatusOK, "target_edit", page{Title: "Edit target " + t.Name, Nav: "targets",
			View: targetFormOf(t.Kind, formOf(t), nil)})
		return nil
	}
	f := readTargetForm(t.Kind, r.PostForm)
	f.Name = t.Name
	next, err := f.definition(t.Kind)
	if err == nil {
		update := c.cfg.Writer.UpdateTarget
		if f.Enabled == f.EnabledWas {
			update = c.cfg.Writer.UpdateTargetKeepingEnabled
		}
		_, err = update(r.Context(), next, journal.OperatorActor(s.Name))
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
	c.render(w, r, p.Status, "target_edit", page{Title: "Edit target " + t.Name, Nav: "targets", View: targetFormOf(t.Kind, f, &p)})
	return nil
}

// targetFormOf is the form of a target of the kind holding f, with the
// problems of a refusal under each field.
func targetFormOf(kind string, f targetForm, p *errorView) *targetFormView {
	return &targetFormView{Name: f.Name, Kind: kind, Form: f, Problem: p,
		Strategy: choiceOf("retry.strategy", "Retry strategy", f.Strategy, "How the wait grows from one attempt to the next.",
			lifecycle.RetryStrategies, p),
		OrderingMode: choiceOf("ordering.mode", "Ordering", f.OrderingMode,
			"fifo: the deliveries of one ordering key go one at a time, in order; none: all in parallel.", lifecycle.OrderingModes, p),
		OnFailure: choiceOf("ordering.on_failure", "When a lane's head fails for good", f.OnFailure,
			"block: the lane waits until an operator redelivers or skips the head; continue: the next goes.", lifecycle.OnFailures, p),
		Config: configViewOf(kind, targetKinds[kind], f.Config, p)}
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
		v.Explanation = "It claims nothing while disabled. Its deliveries are held, not attempted nor stalled, until it is enabled again."
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
