package console

import (
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
)

// static serves the embedded files under /ui/static/. A link carries the
// file's version (asset in the templates), so a versioned request may be
// kept for a year: a new build links another version.
func (c *Console) static(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	name := strings.TrimPrefix(r.URL.Path, "/ui/static/")
	version, known := c.views.versions[name]
	if !known {
		return fmt.Errorf("%w: no static file %s", commands.ErrNotFound, name)
	}
	data, err := files.ReadFile("static/" + name)
	if err != nil {
		return fmt.Errorf("static file %s: %w", name, err)
	}
	h := w.Header()
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	if r.URL.Query().Get("v") == version {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	w.Write(data)
	return nil
}
