package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
)

// settingsView is the settings and their form.
type settingsView struct {
	MaxDispatches, Rate string
	// The caps of the live histories.
	MaxStreams, MaxStreamsPerSession string
	Min, Max                         int
	MinRate, MaxRate                 int
	// The retention, as the API writes it: a period empty for never.
	PayloadAfter, SettledAfter, FailedAfter, ArchiveDir string
	// The callbacks' lists, their entries separated by commas.
	AllowedNetworks, AllowedHosts string
	Problem                       *errorView
}

// settings shows the settings, and saves them (PUT /settings).
func (c *Console) settings(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	current, err := c.cfg.Writer.Settings(r.Context())
	if err != nil {
		return err
	}
	v := settingsView{MaxDispatches: strconv.Itoa(current.Delivery.MaxDispatches), Rate: strconv.Itoa(current.Operations.Rate),
		Min: lifecycle.MinMaxDispatches, Max: lifecycle.MaxMaxDispatches,
		MinRate: lifecycle.MinOperationRate, MaxRate: lifecycle.MaxOperationRate,
		PayloadAfter: period(current.Retention.PayloadAfter), SettledAfter: period(current.Retention.SettledAfter),
		FailedAfter: period(current.Retention.FailedAfter), ArchiveDir: current.Retention.ArchiveDir,
		AllowedNetworks: strings.Join(current.Callbacks.AllowedNetworks, ", "), AllowedHosts: strings.Join(current.Callbacks.AllowedHosts, ", "),
		MaxStreams: strconv.Itoa(current.WithDefaults().Console.MaxStreams), MaxStreamsPerSession: strconv.Itoa(current.WithDefaults().Console.MaxStreamsPerSession)}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		// A setting the form does not send stays as it is, and so do
		// those it has no field for (the callbacks' attempts).
		next := current
		err := invalid(wholeNumber(r, "delivery.max_dispatches", &v.MaxDispatches, &next.Delivery.MaxDispatches),
			wholeNumber(r, "operations.rate", &v.Rate, &next.Operations.Rate),
			wholeNumber(r, "console.max_streams", &v.MaxStreams, &next.Console.MaxStreams),
			wholeNumber(r, "console.max_streams_per_session", &v.MaxStreamsPerSession, &next.Console.MaxStreamsPerSession),
			retentionPeriod(r, "retention.payload_after", &v.PayloadAfter, &next.Retention.PayloadAfter),
			retentionPeriod(r, "retention.settled_after", &v.SettledAfter, &next.Retention.SettledAfter),
			retentionPeriod(r, "retention.failed_after", &v.FailedAfter, &next.Retention.FailedAfter))
		if r.PostForm.Has("retention.archive_dir") {
			v.ArchiveDir = strings.TrimSpace(r.PostForm.Get("retention.archive_dir"))
			next.Retention.ArchiveDir = v.ArchiveDir
		}
		list(r, "callbacks.allowed_networks", &v.AllowedNetworks, &next.Callbacks.AllowedNetworks)
		list(r, "callbacks.allowed_hosts", &v.AllowedHosts, &next.Callbacks.AllowedHosts)
		if err == nil {
			err = c.cfg.Writer.SetSettings(r.Context(), next, journal.OperatorActor(s.Name))
		}
		if err == nil {
			c.configChanged()
			c.log.Info("settings changed", "max_dispatches", next.Delivery.MaxDispatches, "operations_rate", next.Operations.Rate,
				"retention", next.Retention.String(), "max_streams", next.Console.MaxStreams,
				"max_streams_per_session", next.Console.MaxStreamsPerSession, "operator", s.Name, "via", "console")
			c.done(w, r, "/ui/settings", "Settings saved.")
			return nil
		}
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		v.Problem, status = &p, p.Status
	}
	c.render(w, r, status, "settings", page{Title: "Settings", Nav: "settings", View: v})
	return nil
}

// wholeNumber reads the form's field, when it has it, into its text for
// the form and its number n.
func wholeNumber(r *http.Request, field string, text *string, n *int) error {
	if !r.PostForm.Has(field) {
		return nil
	}
	*text = strings.TrimSpace(r.PostForm.Get(field))
	i, err := strconv.Atoi(*text)
	if err != nil {
		return &lifecycle.FieldError{Field: field, Problem: fmt.Sprintf("must be a whole number, not %q", *text)}
	}
	*n = i
	return nil
}

// list reads the form's list field, when it has it, into its text for the
// form and its entries, separated by commas or white space.
func list(r *http.Request, field string, text *string, entries *[]string) {
	if !r.PostForm.Has(field) {
		return
	}
	*text = strings.TrimSpace(r.PostForm.Get(field))
	*entries = strings.FieldsFunc(*text, func(c rune) bool { return c == ',' || unicode.IsSpace(c) })
}

// period is a retention period as the API writes it; "" for never (null).
func period(d *lifecycle.Duration) string {
	if d == nil {
		return ""
	}
	return d.String()
}

// retentionPeriod reads the form's period field, when it has it, into its
// text for the form and the period p: empty is never, as the API's null.
func retentionPeriod(r *http.Request, field string, text *string, p **lifecycle.Duration) error {
	if !r.PostForm.Has(field) {
		return nil
	}
	*text = strings.TrimSpace(r.PostForm.Get(field))
	if *text == "" {
		*p = nil
		return nil
	}
	var d lifecycle.Duration
	if err := d.UnmarshalText([]byte(*text)); err != nil {
		return &lifecycle.FieldError{Field: field, Problem: err.Error() + `, or leave it empty for never`}
	}
	*p = &d
	return nil
}
