package console

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/httpapi"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/sources"
)

// sourceForm is a source's definition as the forms hold it, each field
// named as the API names it.
type sourceForm struct {
	Name, Kind string
	Enabled    bool
	// Config is the kind's configuration, field by field, a password
	// masked.
	Config configValues
}

// readSourceForm reads the form of a source of the kind.
func readSourceForm(kind string, form url.Values) sourceForm {
	return sourceForm{Name: strings.TrimSpace(form.Get("name")), Kind: kind,
		Enabled: form.Get("enabled") == "on", Config: readValues(sourceKinds[kind], form)}
}

// sourceFormView is a source's form, a new one's or an existing one's.
type sourceFormView struct {
	Form    sourceForm
	Config  configView
	Problem *errorView
}

// sourceFormOf is the form of a source holding f, with the problems of a
// refusal under each field. A password is never shown, not even the one
// just typed into a form that was refused.
func sourceFormOf(f sourceForm, p *errorView) *sourceFormView {
	if dsn, ok := f.Config[sources.DatabaseURLField]; ok {
		f.Config = maps.Clone(f.Config)
		f.Config[sources.DatabaseURLField] = redact.DSN(dsn)
	}
	return &sourceFormView{Form: f, Config: configViewOf(f.Kind, sourceKinds[f.Kind], f.Config, p), Problem: p}
}

// sourcesView is the list of sources and, for an admin, the form that
// adds one of a kind.
type sourcesView struct {
	Sources []httpapi.Source
	// Kinds are the kinds a source may be of, each with the link to its
	// form.
	Kinds []string
	// Add is the form of a new source, nil when none is asked for.
	Add *sourceFormView
}

// sourcesPage lists the sources by name, with their status; with
// ?add=<kind>, an admin gets the form of a new source of that kind under
// the list.
func (c *Console) sourcesPage(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	kind := r.URL.Query().Get("add")
	if kind == "" {
		return c.showSources(w, r, http.StatusOK, nil)
	}
	if !s.Role.Allows(auth.Administer) {
		return httpapi.Forbidden(s.Role, auth.Administer)
	}
	if _, ok := sourceKinds[kind]; !ok {
		return invalidField("add", fmt.Sprintf("%q is not a source kind: allowed are %s", kind, strings.Join(sources.Names(), ", ")))
	}
	return c.showSources(w, r, http.StatusOK, sourceFormOf(sourceForm{Kind: kind, Enabled: true, Config: configValues{}}, nil))
}

func (c *Console) showSources(w http.ResponseWriter, r *http.Request, status int, add *sourceFormView) error {
	defs, err := c.cfg.Writer.Sources(r.Context())
	if err != nil {
		return err
	}
	v := sourcesView{Kinds: kindNames(sourceKinds), Add: add}
	if v.Sources, err = httpapi.SourcesOf(r.Context(), c.cfg.DB, defs); err != nil {
		return err
	}
	c.render(w, r, status, "sources", page{Title: "Sources", Nav: "sources", View: v})
	return nil
}

// createSource adds the source of the form (POST /sources).
func (c *Console) createSource(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	kind := strings.TrimSpace(r.PostForm.Get("kind"))
	f := readSourceForm(kind, r.PostForm)
	config, err := f.Config.config(sourceKinds[kind])
	if err == nil {
		// A database_url or a secret shown masked after a refusal must
		// be written whole again.
		config, err = keepSecrets(config, nil)
	}
	var created lifecycle.Source
	if err == nil {
		created, err = c.cfg.Writer.CreateSource(r.Context(), lifecycle.Source{Name: f.Name, Kind: kind, Enabled: f.Enabled, Config: config},
			journal.OperatorActor(s.Name))
	}
	if err != nil {
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		if _, ok := sourceKinds[kind]; !ok {
			return err // no form to show it in: the kind was not one offered
		}
		return c.showSources(w, r, p.Status, sourceFormOf(f, &p))
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

// editSource shows a source's edit form, and saves it (PUT
// /sources/{name}): the whole definition is replaced, its name and kind
// kept. A database_url left as the page showed it, its password masked,
// keeps the stored one, and so does a webhook's secret left masked.
func (c *Console) editSource(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	src, err := c.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	title := "Edit source " + src.Name
	if r.Method != http.MethodPost {
		masked, _ := redact.SourceConfig(src.Config)
		f := sourceForm{Name: src.Name, Kind: src.Kind, Enabled: src.Enabled, Config: valuesOf(sourceKinds[src.Kind], masked)}
		c.render(w, r, http.StatusOK, "source_edit", page{Title: title, Nav: "sources", View: sourceFormOf(f, nil)})
		return nil
	}
	f := readSourceForm(src.Kind, r.PostForm)
	f.Name = src.Name
	next := lifecycle.Source{Name: src.Name, Kind: src.Kind, Enabled: f.Enabled}
	next.Config, err = f.Config.config(sourceKinds[src.Kind])
	if err == nil {
		next.Config, err = keepSecrets(next.Config, src.Config)
	}
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
	c.render(w, r, p.Status, "source_edit", page{Title: title, Nav: "sources", View: sourceFormOf(f, &p)})
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
