package console

import (
	"crypto/rand"
	"errors"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/waybill/waybill/auth"
)

// signinPath is the sign-in page, which its CSRF cookie is bound to.
const signinPath = "/ui/signin"

// signinView is the sign-in form.
type signinView struct {
	// CSRF is the form's token, also in the sign-in cookie: before there
	// is a session, the two must agree.
	CSRF string
	// Next is where a sign-in leads: the page that asked for it.
	Next    string
	Problem string
}

// signinPage shows the sign-in form, or the dashboard to a browser that
// is signed in already.
func (c *Console) signinPage(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	s, err := c.session(w, r)
	if err != nil {
		return err
	}
	if s != nil {
		http.Redirect(w, r, localNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return nil
	}
	c.signinForm(w, r, http.StatusOK, "")
	return nil
}

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request, status int, problem string) {
	csrf := rand.Text()
	c.setCookie(w, r, signinCookie, csrf, signinPath, time.Hour)
	c.render(w, r, status, "signin", page{Title: "Sign in", View: signinView{
		CSRF: csrf, Next: localNext(r.FormValue("next")), Problem: problem}})
}

// signin opens a session for the token of the form, through the token
// store's Authenticate.
func (c *Console) signin(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	cookie, err := r.Cookie(signinCookie)
	if err != nil || !sameSecret(r.PostForm.Get("csrf"), cookie.Value) {
		c.signinForm(w, r, http.StatusForbidden, "The sign-in form had expired or was not this console's. Enter the token again.")
		return nil
	}
	now := c.cfg.Now()
	secret, s, err := c.cfg.Tokens.StartSession(r.Context(), strings.TrimSpace(r.PostForm.Get("token")), now, now.Add(c.cfg.SessionTTL))
	if errors.Is(err, auth.ErrUnauthorized) {
		c.signinForm(w, r, http.StatusUnauthorized,
			"This token is not known. Check that it is whole (wb_…), or create one with `waybill token create`.")
		return nil
	}
	if errors.Is(err, auth.ErrScopedSession) {
		c.signinForm(w, r, http.StatusForbidden,
			"This token is scoped to some sources or targets: it works with the REST API, not here, where every source and target shows.")
		return nil
	}
	if err != nil {
		return err
	}
	c.clearCookie(w, r, signinCookie, signinPath)
	c.setCookie(w, r, sessionCookie, secret, Prefix, c.cfg.SessionTTL)
	c.log.Info("console: signed in", "operator", s.Name, "role", s.Role)
	http.Redirect(w, r, localNext(r.PostForm.Get("next")), http.StatusSeeOther)
	return nil
}

// signout ends the session.
func (c *Console) signout(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	cookie, err := r.Cookie(sessionCookie)
	if err == nil {
		if err := c.cfg.Tokens.EndSession(r.Context(), cookie.Value); err != nil {
			return err
		}
	}
	c.clearCookie(w, r, sessionCookie, Prefix)
	c.log.Info("console: signed out", "operator", s.Name)
	http.Redirect(w, r, signinPath, http.StatusSeeOther)
	return nil
}

// localNext is next when it is a page of the console, else the dashboard:
// a sign-in never leads to another site.
func localNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, Prefix) ||
		path.Clean(u.Path) != strings.TrimSuffix(u.Path, "/") || strings.Contains(next, `\`) || strings.HasPrefix(next, "//") {
		return Prefix
	}
	return u.RequestURI()
}
