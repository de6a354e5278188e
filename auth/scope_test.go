package auth_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/lifecycle"
)

// TestCheckScope: ingest and reader tokens take sources, receipt tokens
// targets, admin tokens nothing; the wrong one is named.
func TestCheckScope(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		role  auth.Role
		scope *auth.Scope
		field string // "" when right
	}{
		{auth.RoleAdmin, nil, ""},
		{auth.RoleIngest, &auth.Scope{Sources: []string{"erp", "crm"}}, ""},
		{auth.RoleReader, &auth.Scope{Sources: []string{"erp"}}, ""},
		{auth.RoleReceipt, &auth.Scope{Targets: []string{"billing"}}, ""},
		{auth.RoleAdmin, &auth.Scope{Sources: []string{"erp"}}, "sources"},
		{auth.RoleAdmin, &auth.Scope{Targets: []string{"billing"}}, "targets"},
		{auth.RoleIngest, &auth.Scope{Targets: []string{"billing"}}, "targets"},
		{auth.RoleReceipt, &auth.Scope{Sources: []string{"erp"}}, "sources"},
		{auth.RoleIngest, &auth.Scope{Sources: []string{}}, "sources"},
		{auth.RoleIngest, &auth.Scope{}, "sources"},
		{auth.RoleReceipt, &auth.Scope{}, "targets"},
		{auth.RoleIngest, &auth.Scope{Sources: []string{"ERP"}}, "sources[0]"},
	} {
		err := auth.CheckScope(c.role, c.scope)
		var fe *lifecycle.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s %+v: %v", c.role, c.scope, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s %+v: %v, want an error in field %s", c.role, c.scope, err, c.field)
		}
	}
}

func TestParseLifetime(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "12h": 12 * time.Hour,
		"90m": 90 * time.Minute, "1h30m": 90 * time.Minute} {
		if got, err := auth.ParseLifetime(in); got != want || err != nil {
			t.Errorf("ParseLifetime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0d", "-1d", "d", "1.5d", "90", "soon", "0s", "-5m", "99999999d"} {
		if got, err := auth.ParseLifetime(in); err == nil {
			t.Errorf("ParseLifetime(%q) = %v, want an error", in, got)
		}
	}
}

// TestScopedTokens: a token's scope is stored, listed and given with its
// identity; an unscoped token's identity has none.
func TestScopedTokens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	ingest, made, err := s.New(ctx, auth.Spec{Name: "erp-feed", Role: auth.RoleIngest, Scope: &auth.Scope{Sources: []string{"erp", "crm"}}})
	if err != nil {
		t.Fatal(err)
	}
	if made.ID != ingest[3:19] || !slices.Equal(made.Sources, []string{"erp", "crm"}) || made.Targets != nil || made.ExpiresAt != nil {
		t.Fatalf("made %+v", made)
	}
	receipt, _, err := s.New(ctx, auth.Spec{Name: "partner", Role: auth.RoleReceipt, Scope: &auth.Scope{Targets: []string{"billing"}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Create(ctx, "rita", auth.RoleReader)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]auth.Identity{
		ingest:  {Name: "erp-feed", Role: auth.RoleIngest, Scope: &auth.Scope{Sources: []string{"erp", "crm"}}},
		receipt: {Name: "partner", Role: auth.RoleReceipt, Scope: &auth.Scope{Targets: []string{"billing"}}},
		plain:   {Name: "rita", Role: auth.RoleReader},
	} {
		if id, err := s.Authenticate(ctx, token); err != nil || !reflect.DeepEqual(id, want) {
			t.Errorf("authenticate %s: %+v, %v; want %+v", want.Name, id, err, want)
		}
	}
	id, _ := s.Authenticate(ctx, ingest)
	if !id.Source("crm") || id.Source("wms") || id.Target("billing") {
		t.Errorf("the ingest token's reach: %+v", id.Scope)
	}
	if id, _ := s.Authenticate(ctx, plain); !id.Source("wms") || !id.Target("billing") {
		t.Errorf("an unscoped token does not reach everything")
	}
	listed, err := s.List(ctx)
	if err != nil || len(listed) != 3 || !slices.Equal(listed[0].Sources, []string{"erp", "crm"}) ||
		!slices.Equal(listed[1].Targets, []string{"billing"}) || listed[2].Sources != nil || listed[2].Targets != nil {
		t.Fatalf("listed %+v, %v", listed, err)
	}

	// A wrong scope stores nothing.
	var fe *lifecycle.FieldError
	if _, _, err := s.New(ctx, auth.Spec{Name: "root", Role: auth.RoleAdmin, Scope: &auth.Scope{Sources: []string{"erp"}}}); !errors.As(err, &fe) || fe.Field != "sources" {
		t.Fatalf("a scoped admin token: %v", err)
	}
	if listed, _ := s.List(ctx); len(listed) != 3 {
		t.Fatalf("%d tokens after a refusal", len(listed))
	}
}

// TestTokensExpire: a token with a lifetime works until it ends, by the
// store's clock, and is unauthorized from then on.
func TestTokensExpire(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	s := auth.NewStore(dbtest.Pool(t), clock.Now)
	token, made, err := s.New(ctx, auth.Spec{Name: "ci", Role: auth.RoleIngest, Lifetime: 90 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	end := clock.Now().Add(90 * 24 * time.Hour)
	if made.ExpiresAt == nil || !made.ExpiresAt.Equal(end) {
		t.Fatalf("expires at %v, want %v", made.ExpiresAt, end)
	}
	if listed, err := s.List(ctx); err != nil || listed[0].ExpiresAt == nil || !listed[0].ExpiresAt.Equal(end) {
		t.Fatalf("listed %+v, %v", listed, err)
	}
	clock.Advance(90*24*time.Hour - time.Second)
	if _, err := s.Authenticate(ctx, token); err != nil {
		t.Fatalf("a second before its end: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := s.Authenticate(ctx, token); !errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("at its end: %v", err)
	}
	// A session lasts no longer than its token.
	admin, _, err := s.New(ctx, auth.Spec{Name: "ops", Role: auth.RoleAdmin, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_, session, err := s.StartSession(ctx, admin, clock.Now(), clock.Now().Add(12*time.Hour))
	if err != nil || !session.Expires.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("session of a token with an hour left: %+v, %v", session, err)
	}
}

// TestLastUseIsRecordedOncePerResolution: the use of a token is written
// at its first authentication and then at most once per UseResolution.
func TestLastUseIsRecordedOncePerResolution(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := dbtest.Pool(t)
	clock := testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	s := auth.NewStore(db, clock.Now)
	token, err := s.Create(ctx, "feed", auth.RoleIngest)
	if err != nil {
		t.Fatal(err)
	}
	lastUse := func() *time.Time {
		t.Helper()
		listed, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return listed[0].LastUsedAt
	}
	if at := lastUse(); at != nil {
		t.Fatalf("used at %v before any use", at)
	}
	first := clock.Now()
	for range 3 {
		if _, err := s.Authenticate(ctx, token); err != nil {
			t.Fatal(err)
		}
		clock.Advance(10 * time.Second)
	}
	if at := lastUse(); at == nil || !at.Equal(first) {
		t.Fatalf("used at %v, want %v: the first use only", at, first)
	}
	// Another server that read the row before the use writes nothing
	// within the resolution either.
	other := auth.NewStore(db, clock.Now)
	if _, err := other.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	if at := lastUse(); !at.Equal(first) {
		t.Fatalf("used at %v after another server's use within a minute", at)
	}
	clock.Advance(first.Add(auth.UseResolution).Sub(clock.Now()))
	if _, err := s.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	if at := lastUse(); !at.Equal(clock.Now()) {
		t.Fatalf("used at %v, want %v", at, clock.Now())
	}
}

// TestRevokeName: every token of a name goes; an unknown name is
// ErrNoToken; a name holding the last admin token keeps all its tokens.
func TestRevokeName(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	var feed []string
	for range 2 {
		token, err := s.Create(ctx, "feed", auth.RoleIngest)
		if err != nil {
			t.Fatal(err)
		}
		feed = append(feed, token)
	}
	admin, err := s.Create(ctx, "ops", auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "ops", auth.RoleReader); err != nil {
		t.Fatal(err)
	}
	revoked, err := s.RevokeName(ctx, "feed")
	if err != nil || len(revoked) != 2 || revoked[0].Name != "feed" {
		t.Fatalf("revoke feed: %+v, %v", revoked, err)
	}
	for _, token := range feed {
		if _, err := s.Authenticate(ctx, token); !errors.Is(err, auth.ErrUnauthorized) {
			t.Fatalf("a revoked token: %v", err)
		}
	}
	if _, err := s.RevokeName(ctx, "feed"); !errors.Is(err, auth.ErrNoToken) {
		t.Fatalf("revoke twice: %v", err)
	}
	if _, err := s.RevokeName(ctx, "ops"); !errors.Is(err, auth.ErrLastAdmin) {
		t.Fatalf("revoke the last admin's name: %v", err)
	}
	if listed, _ := s.List(ctx); len(listed) != 2 {
		t.Fatalf("%d tokens left, want ops's two", len(listed))
	}
	if _, err := s.Authenticate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	var fe *lifecycle.FieldError
	if _, err := s.RevokeName(ctx, "Ops"); !errors.As(err, &fe) || fe.Field != "name" {
		t.Fatalf("a bad name: %v", err)
	}
}

// TestScopedTokenHasNoSession: the console shows everything, so a scoped
// token cannot sign in to it.
func TestScopedTokenHasNoSession(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	token, _, err := s.New(ctx, auth.Spec{Name: "erp-reader", Role: auth.RoleReader, Scope: &auth.Scope{Sources: []string{"erp"}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, err := s.StartSession(ctx, token, now, now.Add(time.Hour)); !errors.Is(err, auth.ErrScopedSession) {
		t.Fatalf("session of a scoped token: %v", err)
	}
}

// TestExpiredAdminTokensDoNotCount: an expired admin token is not an
// admin's way in, so the last working one is never revoked beside it,
// and a start with only expired ones makes a new one.
func TestExpiredAdminTokensDoNotCount(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := testclock.New(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	s := auth.NewStore(dbtest.Pool(t), clock.Now)
	if _, _, err := s.New(ctx, auth.Spec{Name: "temp", Role: auth.RoleAdmin, Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "ops", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := s.RevokeName(ctx, "ops"); !errors.Is(err, auth.ErrLastAdmin) {
		t.Fatalf("revoke the last working admin token: %v", err)
	}
	s2 := auth.NewStore(dbtest.Pool(t), clock.Now)
	if _, _, err := s2.New(ctx, auth.Spec{Name: "temp", Role: auth.RoleAdmin, Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	created, err := s2.EnsureAdminToken(ctx, t.TempDir()+"/admin.token")
	if err != nil || !created {
		t.Fatalf("a start with only an expired admin token: created %v, %v", created, err)
	}
}
