package console

import (
	"net/http"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/httpapi"
)

// tokensView is the list of the API's tokens and the form that makes one;
// Made is the token just made, whose secret this page shows once.
type tokensView struct {
	Tokens  []httpapi.Token
	Made    *httpapi.NewToken
	Name    field
	Role    choice
	Sources field
	Targets field
	Expires field
	Problem *errorView
}

// tokensPage lists the tokens, oldest first (GET /tokens).
func (c *Console) tokensPage(w http.ResponseWriter, r *http.Request, _ *auth.Session) error {
	return c.showTokens(w, r, http.StatusOK, httpapi.TokenRequest{Role: string(auth.RoleIngest)}, nil, nil)
}

// showTokens renders the page with the form filled from req.
func (c *Console) showTokens(w http.ResponseWriter, r *http.Request, status int, req httpapi.TokenRequest,
	made *httpapi.NewToken, problem *errorView) error {
	tokens, err := c.cfg.Tokens.List(r.Context())
	if err != nil {
		return err
	}
	v := tokensView{Made: made, Problem: problem,
		Name: fieldOf("name", "Name", req.Name, "1 to 63 of a-z, 0-9, _ and -: the subject its actions are journaled under.", problem),
		Role: choiceOf("role", "Role", req.Role, "What it may do: admin everything, ingest post messages, reader read, receipt post receipts.",
			auth.Roles, problem),
		Sources: fieldOf("sources", "Sources", strings.Join(req.Sources, ","),
			"For an ingest or reader token: the sources it is bound to, separated by commas. Empty: all.", problem),
		Targets: fieldOf("targets", "Targets", strings.Join(req.Targets, ","),
			"For a receipt token: the targets it is bound to, separated by commas. Empty: all.", problem),
		Expires: fieldOf("expires", "Expires after", req.Expires, "Days (90d) or a duration (12h). Empty: never.", problem)}
	for _, t := range tokens {
		v.Tokens = append(v.Tokens, httpapi.TokenOf(t))
	}
	c.render(w, r, status, "tokens", page{Title: "Tokens", Nav: "tokens", View: v})
	return nil
}

// createToken makes the token of the form (POST /tokens) and shows its
// secret, this once, on the answer itself: it is never put in a cookie or
// a redirect.
func (c *Console) createToken(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	get := func(name string) string { return strings.TrimSpace(r.PostForm.Get(name)) }
	req := httpapi.TokenRequest{Name: get("name"), Role: get("role"), Sources: auth.SplitNames(get("sources")), Targets: auth.SplitNames(get("targets")),
		Expires: get("expires")}
	made, err := httpapi.CreateToken(r.Context(), c.cfg.Tokens, req)
	if err != nil {
		p := problemOf(err)
		if p.Status >= http.StatusInternalServerError {
			return err
		}
		return c.showTokens(w, r, p.Status, req, nil, &p)
	}
	c.log.Info("token created", "token_id", made.Token.ID, "name", made.Token.Name, "role", made.Token.Role,
		"operator", s.Name, "via", "console")
	return c.showTokens(w, r, http.StatusCreated, httpapi.TokenRequest{Role: string(auth.RoleIngest)}, &made, nil)
}

// revokeTokens asks, then revokes every token of a name (DELETE
// /tokens/{name}).
func (c *Console) revokeTokens(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	name := r.PathValue("name")
	v := confirmView{Question: "Revoke every token named " + name + "?", Button: "Revoke", Danger: true, Back: "/ui/tokens",
		Explanation: "Clients that use them are refused from now on (other servers within 30 s), and the console sessions " +
			"signed in with them end. The last admin token is never revoked."}
	return c.confirm(w, r, "Revoke tokens", v, func() (string, error) {
		revoked, err := httpapi.RevokeTokens(r.Context(), c.cfg.Tokens, name)
		if err != nil {
			return "", err
		}
		c.log.Info("tokens revoked", "name", name, "count", len(revoked), "operator", s.Name, "via", "console")
		return "Revoked the tokens named " + name + ".", nil
	})
}
