package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/commands"
)

// TokenRequest is the body of POST /tokens.
type TokenRequest struct {
	// Name is the token's name, the subject its actions are journaled
	// under; a name may hold several tokens.
	Name string `json:"name"`
	// Role is admin, ingest, reader or receipt.
	Role string `json:"role"`
	// Sources scopes an ingest or reader token to those sources; Targets
	// a receipt token to those targets. Left out, the token is unscoped.
	Sources []string `json:"sources"`
	Targets []string `json:"targets"`
	// Expires is the token's lifetime: days ("90d") or a Go duration
	// ("12h"). Left out, it does not expire.
	Expires string `json:"expires"`
}

// Token is the token resource: what is stored of a token, never its secret.
type Token struct {
	// ID is the token's public part, the 16 hex digits after "wb_".
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"`
	// Sources or Targets are its scope; both null when it is unscoped.
	Sources   []string  `json:"sources"`
	Targets   []string  `json:"targets"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when it stops working; null when it does not expire.
	ExpiresAt *time.Time `json:"expires_at"`
	// LastUsedAt is its last use, recorded once a minute at most; null
	// before the first.
	LastUsedAt *time.Time `json:"last_used_at"`
}

// TokenList is the body of GET /tokens, oldest first.
type TokenList struct {
	Items []Token `json:"items"`
}

// NewToken is the answer of POST /tokens: the token made, and the token
// itself, which is shown this once.
type NewToken struct {
	Token  Token  `json:"token"`
	Secret string `json:"secret"`
}

// TokenOf is the resource of a stored token.
func TokenOf(t auth.Token) Token {
	return Token{ID: t.ID, Name: t.Name, Role: string(t.Role), Sources: t.Sources, Targets: t.Targets,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: utc(t.ExpiresAt), LastUsedAt: utc(t.LastUsedAt)}
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// CreateToken makes in store the token req asks for: the one way of the
// API and the console. Every problem of the input is an ErrInvalid by
// field.
func CreateToken(ctx context.Context, store *auth.Store, req TokenRequest) (NewToken, error) {
	spec, err := parseTokenRequest(req)
	if err != nil {
		return NewToken{}, err
	}
	secret, t, err := store.New(ctx, spec)
	if err != nil {
		return NewToken{}, invalidOr(err)
	}
	return NewToken{Token: TokenOf(t), Secret: secret}, nil
}

// RevokeTokens revokes in store every token of the name, as the API and
// the console do: a bad name is an ErrInvalid, an unknown one
// auth.ErrNoToken, the last admin token's auth.ErrLastAdmin.
func RevokeTokens(ctx context.Context, store *auth.Store, name string) ([]auth.Token, error) {
	revoked, err := store.RevokeName(ctx, name)
	return revoked, invalidOr(err)
}

// parseTokenRequest is the spec of a token a request asks for.
func parseTokenRequest(req TokenRequest) (auth.Spec, error) {
	spec := auth.Spec{Name: req.Name, Role: auth.Role(req.Role)}
	if req.Sources != nil || req.Targets != nil {
		spec.Scope = &auth.Scope{Sources: req.Sources, Targets: req.Targets}
	}
	if req.Expires != "" {
		d, err := auth.ParseLifetime(req.Expires)
		if err != nil {
			return spec, fieldError("expires", err.Error())
		}
		spec.Lifetime = d
	}
	return spec, nil
}

// tokens is the store of the token routes, or why there is none.
func (s *Server) tokens() (*auth.Store, error) {
	if s.cfg.Tokens == nil {
		return nil, fmt.Errorf("%w: this server does not manage tokens", commands.ErrNotFound)
	}
	return s.cfg.Tokens, nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	store, err := s.tokens()
	if err != nil {
		return err
	}
	tokens, err := store.List(r.Context())
	if err != nil {
		return err
	}
	out := TokenList{Items: make([]Token, len(tokens))}
	for i, t := range tokens {
		out.Items[i] = TokenOf(t)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	store, err := s.tokens()
	if err != nil {
		return err
	}
	var req TokenRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	made, err := CreateToken(r.Context(), store, req)
	if err != nil {
		return err
	}
	s.log.Info("token created", "token_id", made.Token.ID, "name", made.Token.Name, "role", made.Token.Role,
		"operator", identity(r).Name)
	w.Header().Set("Location", Prefix+"/tokens/"+made.Token.Name)
	writeJSON(w, http.StatusCreated, made)
	return nil
}

// deleteToken revokes every token of the name.
func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request) error {
	store, err := s.tokens()
	if err != nil {
		return err
	}
	revoked, err := RevokeTokens(r.Context(), store, r.PathValue("name"))
	if err != nil {
		return err
	}
	ids := make([]string, len(revoked))
	for i, t := range revoked {
		ids[i] = t.ID
	}
	s.log.Info("tokens revoked", "name", r.PathValue("name"), "token_ids", strings.Join(ids, ","), "operator", identity(r).Name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// invalidOr makes err an ErrInvalid when it holds field errors, as the
// store returns them bare.
func invalidOr(err error) error {
	if err != nil && len(fieldErrors(err)) > 0 {
		return invalid(err)
	}
	return err
}
