package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// sourceForm is a source's definition as the forms hold it, each field
// named as the API names it.
type sourceForm struct {
	Name, Kind string
	Enabled    bool
	// Config is the kind's configuration as JSON, a password masked.
	Config string
}

// readSourceForm reads a source's form; config is the text as sent.
func readSourceForm(form url.Values) sourceForm {
	return sourceForm{Name: strings.TrimSpace(form.Get("name")), Kind: strings.TrimSpace(form.Get("kind")),
		Enabled: form.Get("enabled") == "on", Config: form.Get("config")}
}

// definition is the source the form describes, as a POST of the API
// would carry it.
func (f sourceForm) definition() lifecycle.Source {
	return lifecycle.Source{Name: f.Name, Kind: f.Kind, Enabled: f.Enabled, Config: f.config()}
}

// config is the form's configuration; none, the kind's defaults, when it
// is left empty.
func (f sourceForm) config() json.RawMessage {
	if strings.TrimSpace(f.Config) == "" {
		return nil
	}
	return json.RawMessage(f.Config)
}

// sourcesView is the list of sources and the form that adds one.
type sourcesView struct {
	Sources []httpapi.Source
	Form    sourceForm
	Kind    choice
	// ConfigProblems are the refusal's problems in config, shown under
	// it.
	ConfigProblems []string
	Problem        *errorView
}

// sourcesPage lists the sources by name, with their status.
func (c *Console) sourcesPage(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	return c.showSources(w, r, http.StatusOK, sourcesView{Form: sourceForm{Kind: sources.KindDirectory, Enabled: true, Config: "{}"}})
}

func (c *Console) showSources(w http.ResponseWriter, r *http.Request, status int, v sourcesView) error {
	defs, err := c.cfg.Writer.Sources(r.Context())
	if err != nil {
		return err
	}
	if v.Sources, err = httpapi.SourcesOf(r.Context(), c.cfg.DB, defs); err != nil {
		return err
	}
	v.Kind = choiceOf("kind", "Kind", v.Form.Kind, "directory: files dropped in a folder; inbox_table: rows of a table of another PostgreSQL database.",
		sources.Names(), v.Problem)
	v.ConfigProblems = configProblems(v.Problem)
	c.render(w, r, status, "sources", page{Title: "Sources", Nav: "sources", View: v})
	return nil
}

// createSource adds the source of the form (POST /sources).
func (c *Console) createSource(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	f := readSourceForm(r.PostForm)
	created, err := c.cfg.Writer.CreateSource(r.Context(), f.definition(), journal.OperatorActor(s.Name))
	if err != nil {
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		f.Config = showConfig(json.RawMessage(f.Config))
		return c.showSources(w, r, p.Status, sourcesView{Form: f, Problem: &p})
	}
	c.configChanged()
	c.log.Info("source created", "source", created.Name, "kind", created.Kind, "operator", s.Name, "via", "console")
	c.done(w, r, "/ui/sources/"+created.Name, "Source "+created.Name+" added.")
	return nil
}

// sourceView is one source's definition and status.
type sourceView struct {
	Source httpapi.Source
	// Config is the kind's configuration, indented, a password masked.
	Config string
	// Messages is the list of the messages it took.
	Messages string
}

// source shows a source's definition and what its running shows.
func (c *Console) source(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	src, err := c.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := sourceView{Source: src, Config: showConfig(src.Config), Messages: listURL(url.Values{"source": {src.Name}})}
	c.render(w, r, http.StatusOK, "source", page{Title: "Source " + src.Name, Nav: "sources", View: v})
	return nil
}

// findSource is the source of that name with its status; ErrNotFound when
// there is none.
func (c *Console) findSource(ctx context.Context, name string) (httpapi.Source, error) {
	defs, err := c.cfg.Writer.Sources(ctx)
	if err != nil {
		return httpapi.Source{}, err
	}
	i := slices.IndexFunc(defs, func(d lifecycle.Source) bool { return d.Name == name })
	if i < 0 {
		return httpapi.Source{}, fmt.Errorf("source %q: %w", name, commands.ErrNotFound)
	}
	items, err := httpapi.SourcesOf(ctx, c.cfg.DB, defs[i:i+1])
	if err != nil {
		return httpapi.Source{}, err
	}
	return items[0], nil
}

// definitionOf is the stored definition of a source.
func definitionOf(src httpapi.Source) lifecycle.Source {
	return lifecycle.Source{Name: src.Name, Kind: src.Kind, Enabled: src.Enabled, Config: src.Config}
}

// editSourceView is the edit form of a source.
type editSourceView struct {
	Source         httpapi.Source
	Form           sourceForm
	ConfigProblems []string
	Problem        *errorView
}

// editSource shows a source's edit form, and saves it (PUT
// /sources/{name}): the whole definition is replaced, its name and kind
// kept. A database_url left as the page showed it, its password masked,
// keeps the stored one.
func (c *Console) editSource(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	src, err := c.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := editSourceView{Source: src, Form: sourceForm{Name: src.Name, Kind: src.Kind, Enabled: src.Enabled, Config: showConfig(src.Config)}}
	status := http.StatusOK
	if r.Method == http.MethodPost {
		f := readSourceForm(r.PostForm)
		next := lifecycle.Source{Name: src.Name, Kind: src.Kind, Enabled: f.Enabled}
		next.Config, err = keepPassword(f.config(), src.Config)
		if err == nil {
			_, err = c.cfg.Writer.UpdateSource(r.Context(), next, journal.OperatorActor(s.Name))
		}
		if err == nil {
			c.configChanged()
			c.log.Info("source updated", "source", src.Name, "enabled", next.Enabled, "operator", s.Name, "via", "console")
			c.done(w, r, "/ui/sources/"+src.Name, "Source "+src.Name+" saved.")
			return nil
		}
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		v.Form = sourceForm{Name: src.Name, Kind: src.Kind, Enabled: f.Enabled, Config: showConfig(json.RawMessage(f.Config))}
		v.Problem, v.ConfigProblems, status = &p, configProblems(&p), p.Status
	}
	c.render(w, r, status, "source_edit", page{Title: "Edit source " + src.Name, Nav: "sources", View: v})
	return nil
}

// enableSource asks, then enables or disables a source, as the path ends:
// a PUT of its definition with enabled changed.
func (c *Console) enableSource(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	src, err := c.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	enable := strings.HasSuffix(r.URL.Path, "/enable")
	v := confirmView{Back: "/ui/sources/" + src.Name}
	if enable {
		v.Question, v.Button = "Enable source "+src.Name+"?", "Enable"
		v.Explanation = "A process takes its lease and polls it again, from where it stopped."
	} else {
		v.Question, v.Button, v.Danger = "Disable source "+src.Name+"?", "Disable", true
		v.Explanation = "It takes nothing and touches nothing while disabled; what waits for it stays where it is. Its progress is kept."
	}
	return c.confirm(w, r, v.Button+" "+src.Name, v, func() (string, error) {
		def := definitionOf(src)
		def.Enabled = enable
		if _, err := c.cfg.Writer.UpdateSource(r.Context(), def, journal.OperatorActor(s.Name)); err != nil {
			return "", err
		}
		c.configChanged()
		c.log.Info("source updated", "source", src.Name, "enabled", enable, "operator", s.Name, "via", "console")
		if enable {
			return "Source " + src.Name + " is enabled.", nil
		}
		return "Source " + src.Name + " is disabled.", nil
	})
}

// deleteSource asks, then deletes a source (DELETE /sources/{name}).
func (c *Console) deleteSource(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	src, err := c.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	v := confirmView{Question: "Delete source " + src.Name + "?", Button: "Delete", Danger: true, Back: "/ui/sources",
		Explanation: "It takes nothing more, and its progress goes with it: an inbox's watermark, and the processed markers it " +
			"still owes, which are then never written. The messages it took stay. Created again, it starts over."}
	return c.confirm(w, r, "Delete "+src.Name, v, func() (string, error) {
		if err := c.cfg.Writer.DeleteSource(r.Context(), src.Name, journal.OperatorActor(s.Name)); err != nil {
			return "", err
		}
		c.configChanged()
		c.log.Info("source deleted", "source", src.Name, "operator", s.Name, "via", "console")
		return "Source " + src.Name + " deleted.", nil
	})
}

// configProblems are the problems of a refusal in the configuration's
// fields, to show under the configuration.
func configProblems(p *errorView) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, f := range p.Fields {
		if f.Field == "config" || strings.HasPrefix(f.Field, "config.") {
			out = append(out, f.Field+": "+f.Problem)
		}
	}
	return out
}
