package auth_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testclock"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/schema"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func newStore(t *testing.T) (*auth.Store, *pgxpool.Pool) {
	t.Helper()
	db := dbtest.Pool(t)
	return auth.NewStore(db, nil), db
}

var tokenForm = regexp.MustCompile(`^wb_[0-9a-f]{16}_[0-9a-f]{64}$`)

func TestCreateAndAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	tokens := map[string]auth.Identity{}
	for _, id := range []auth.Identity{
		{Name: "alice", Role: auth.RoleAdmin},
		{Name: "erp-feed", Role: auth.RoleIngest},
		{Name: "dashboard", Role: auth.RoleReader},
		// A second token of a name: both stay valid.
		{Name: "alice", Role: auth.RoleReader},
	} {
		token, err := s.Create(ctx, id.Name, id.Role)
		if err != nil {
			t.Fatal(err)
		}
		if !tokenForm.MatchString(token) {
			t.Fatalf("token %q is not of the form wb_<16 hex>_<64 hex>", token)
		}
		if _, dup := tokens[token]; dup {
			t.Fatalf("token %q returned twice", token)
		}
		tokens[token] = id
	}
	for token, want := range tokens {
		got, err := s.Authenticate(ctx, token)
		if err != nil || got != want {
			t.Errorf("Authenticate(%s) = %+v, %v; want %+v", token, got, err, want)
		}
	}

	// Only the hash is kept: no column holds the secret.
	rows, err := db.Query(ctx, `SELECT id || ' ' || name || ' ' || role || ' ' || encode(secret_sha256, 'hex') FROM api_tokens`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var row string
		if err := rows.Scan(&row); err != nil {
			t.Fatal(err)
		}
		for token := range tokens {
			if strings.Contains(row, token[len("wb_")+16+1:]) {
				t.Errorf("row %q holds the secret of %s", row, token)
			}
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(tokens) {
		t.Errorf("%d rows, want %d", n, len(tokens))
	}
}

func TestAuthenticateRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	token, err := s.Create(ctx, "alice", auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	id, secret := token[3:19], token[20:]
	flip := func(s string, i int) string {
		c := byte('0')
		if s[i] == '0' {
			c = '1'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	for name, bad := range map[string]string{
		"wrong secret":          "wb_" + id + "_" + flip(secret, len(secret)-1),
		"wrong first of secret": "wb_" + id + "_" + flip(secret, 0),
		"unknown id":            "wb_" + flip(id, 5) + "_" + secret,
		"empty":                 "",
		"bearer prefix":         "Bearer " + token,
		"upper case":            strings.ToUpper(token),
		"upper-case secret":     "wb_" + id + "_" + strings.ToUpper(secret),
		"no prefix":             id + "_" + secret,
		"other prefix":          "xx_" + id + "_" + secret,
		"other separator":       "wb_" + id + "-" + secret,
		"short":                 token[:len(token)-1],
		"long":                  token + "0",
		"trailing newline":      token + "\n",
		"not hex":               "wb_" + id + "_" + secret[:63] + "g",
		"id and secret swapped": "wb_" + secret[:16] + "_" + id + secret[16:],
	} {
		if got, err := s.Authenticate(ctx, bad); !errors.Is(err, auth.ErrUnauthorized) || got != (auth.Identity{}) {
			t.Errorf("%s: Authenticate(%q) = %+v, %v; want ErrUnauthorized", name, bad, got, err)
		} else if err.Error() != auth.ErrUnauthorized.Error() {
			t.Errorf("%s: the error %q says more than that the token is unknown", name, err)
		}
	}
}

func TestCreateValidates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	for _, c := range []struct {
		name  string
		role  auth.Role
		field string
	}{
		{"", auth.RoleAdmin, "name"},
		{"Alice", auth.RoleAdmin, "name"},
		{"alice smith", auth.RoleAdmin, "name"},
		{strings.Repeat("a", 64), auth.RoleAdmin, "name"},
		{"alice", "", "role"},
		{"alice", "root", "role"},
		{"alice", "Admin", "role"},
	} {
		token, err := s.Create(ctx, c.name, c.role)
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Create(%q, %q) = %q, %v; want an error in field %s", c.name, c.role, token, err, c.field)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tokens stored (%v), want none", n, err)
	}
}

func TestEnsureAdminToken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	dir := t.TempDir()
	// The directory does not exist yet: EnsureAdminToken makes it.
	path := filepath.Join(dir, "var", auth.AdminTokenFile)
	created, err := s.EnsureAdminToken(ctx, path)
	if err != nil || !created {
		t.Fatalf("first EnsureAdminToken = %v, %v; want created", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("token file mode %v, want -rw-------", fi.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	content := string(b)
	if !strings.HasSuffix(content, "\n") || !tokenForm.MatchString(strings.TrimSuffix(content, "\n")) {
		t.Fatalf("token file holds %q, want one token and a newline", content)
	}
	if id, err := s.Authenticate(ctx, strings.TrimSpace(content)); err != nil || id != (auth.Identity{Name: "admin", Role: auth.RoleAdmin}) {
		t.Fatalf("the file's token: %+v, %v", id, err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("data dir holds %v (%v), want only the token file", entries, err)
	}

	// An admin token exists: nothing happens, to the store or the file,
	// even when the file was changed or is asked for elsewhere.
	if err := os.WriteFile(path, []byte("edited\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other", auth.AdminTokenFile)
	for _, p := range []string{path, other} {
		if created, err := s.EnsureAdminToken(ctx, p); err != nil || created {
			t.Fatalf("EnsureAdminToken(%s) again = %v, %v; want nothing done", p, created, err)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "edited\n" {
		t.Fatalf("token file after the second call: %q, %v", b, err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("second call wrote %s: %v", other, err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d tokens (%v), want 1", n, err)
	}
}

func TestEnsureAdminTokenOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	dir := t.TempDir()

	// Servers starting together: one of them creates the token.
	var wg sync.WaitGroup
	results := make([]bool, 4)
	for i := range results {
		wg.Go(func() {
			created, err := s.EnsureAdminToken(ctx, filepath.Join(dir, string(rune('a'+i)), auth.AdminTokenFile))
			if err != nil {
				t.Error(err)
			}
			results[i] = created
		})
	}
	wg.Wait()
	n := 0
	for _, created := range results {
		if created {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d calls created a token, want 1", n)
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM api_tokens`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d tokens (%v), want 1", rows, err)
	}
}

func TestEnsureAdminTokenBesideOtherTokens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	dir := t.TempDir()
	if _, err := s.Create(ctx, "feed", auth.RoleIngest); err != nil {
		t.Fatal(err)
	}
	// Tokens of other roles do not count.
	path := filepath.Join(dir, auth.AdminTokenFile)
	if created, err := s.EnsureAdminToken(ctx, path); err != nil || !created {
		t.Fatalf("EnsureAdminToken beside an ingest token = %v, %v; want created", created, err)
	}
	// An admin token of any name counts.
	s2, _ := newStore(t)
	if _, err := s2.Create(ctx, "alice", auth.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	path2 := filepath.Join(dir, "second", auth.AdminTokenFile)
	if created, err := s2.EnsureAdminToken(ctx, path2); err != nil || created {
		t.Fatalf("EnsureAdminToken beside alice's admin token = %v, %v; want nothing done", created, err)
	}
}

func TestEnsureAdminTokenUnwritable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := newStore(t)
	// A file where the directory should be: the token cannot be written,
	// so none is kept and the next start tries again.
	blocker := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if created, err := s.EnsureAdminToken(ctx, filepath.Join(blocker, auth.AdminTokenFile)); err == nil || created {
		t.Fatalf("EnsureAdminToken into a file = %v, %v; want an error", created, err)
	}
	good := filepath.Join(t.TempDir(), auth.AdminTokenFile)
	if created, err := s.EnsureAdminToken(ctx, good); err != nil || !created {
		t.Fatalf("EnsureAdminToken after the failure = %v, %v; want created", created, err)
	}
}

func TestTokensSurviveProjectionReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	token, err := s.Create(ctx, "alice", auth.RoleReader)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.ResetProjections(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := schema.Ensure(ctx, db); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Authenticate(ctx, token); err != nil || id.Name != "alice" {
		t.Fatalf("after a projection reset: %+v, %v", id, err)
	}
}

// TestAuthenticateCachesRowsForTheirTTL deletes a token's row behind the
// store's back: the token works until CacheTTL has passed since the row
// was read, then stops.
func TestAuthenticateCachesRowsForTheirTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := dbtest.Pool(t)
	clock := testclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := auth.NewStore(db, clock.Now)
	token, err := s.Create(ctx, "alice", auth.RoleReader)
	if err != nil {
		t.Fatal(err)
	}
	want := auth.Identity{Name: "alice", Role: auth.RoleReader}
	if id, err := s.Authenticate(ctx, token); err != nil || id != want {
		t.Fatalf("authenticate: %+v, %v", id, err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM api_tokens`); err != nil {
		t.Fatal(err)
	}
	clock.Advance(auth.CacheTTL - time.Second)
	if id, err := s.Authenticate(ctx, token); err != nil || id != want {
		t.Fatalf("authenticate within the TTL: %+v, %v", id, err)
	}
	// A wrong secret for a cached id is refused all the same.
	wrong := token[:len(token)-1] + map[bool]string{true: "1", false: "0"}[token[len(token)-1] == '0']
	if _, err := s.Authenticate(ctx, wrong); !errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("wrong secret: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := s.Authenticate(ctx, token); !errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("authenticate after the TTL: %v", err)
	}
}

// TestTokensAreCreatedAtTheStoresClock: a token's creation time, made by
// Create and by EnsureAdminToken, is the store's clock, not the machine's.
func TestTokensAreCreatedAtTheStoresClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	at := time.Date(2030, 6, 7, 8, 9, 10, 0, time.UTC)
	s := auth.NewStore(dbtest.Pool(t), testclock.New(at).Now)
	if _, err := s.EnsureAdminToken(ctx, filepath.Join(t.TempDir(), auth.AdminTokenFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "alice", auth.RoleReader); err != nil {
		t.Fatal(err)
	}
	listed, err := s.List(ctx)
	if err != nil || len(listed) != 2 {
		t.Fatalf("list: %+v, %v", listed, err)
	}
	for _, tk := range listed {
		if !tk.CreatedAt.Equal(at) {
			t.Errorf("token %s created at %v, want %v", tk.Name, tk.CreatedAt, at)
		}
	}
}

func TestListAndRevoke(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, db := newStore(t)
	var tokens []string
	for _, id := range []auth.Identity{{Name: "alice", Role: auth.RoleAdmin}, {Name: "erp-feed", Role: auth.RoleIngest},
		{Name: "dashboard", Role: auth.RoleReader}} {
		token, err := s.Create(ctx, id.Name, id.Role)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	listed, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range listed {
		got = append(got, fmt.Sprintf("%s %s %s", tk.ID, tk.Name, tk.Role))
	}
	want := []string{tokens[0][3:19] + " alice admin", tokens[1][3:19] + " erp-feed ingest", tokens[2][3:19] + " dashboard reader"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}

	// Another server has the ingest token's row cached: it keeps taking it
	// for the rest of CacheTTL, the store that revoked it at once no more.
	clock := testclock.New(time.Now())
	other := auth.NewStore(db, clock.Now)
	if _, err := other.Authenticate(ctx, tokens[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tokens[1]); err != nil {
		t.Fatal(err)
	}
	revoked, err := s.Revoke(ctx, tokens[1][3:19])
	if err != nil || revoked.Name != "erp-feed" || revoked.Role != auth.RoleIngest {
		t.Fatalf("revoke: %+v, %v", revoked, err)
	}
	if _, err := s.Authenticate(ctx, tokens[1]); !errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("revoked token on the revoking store: %v", err)
	}
	if _, err := other.Authenticate(ctx, tokens[1]); err != nil {
		t.Fatalf("revoked token cached by another store: %v", err)
	}
	clock.Advance(auth.CacheTTL)
	if _, err := other.Authenticate(ctx, tokens[1]); !errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("revoked token after the TTL: %v", err)
	}

	// A whole token names its row too; an unknown id and a malformed one
	// are refused, and so is the last admin token.
	if _, err := s.Revoke(ctx, tokens[2]); err != nil {
		t.Fatalf("revoke by the whole token: %v", err)
	}
	if _, err := s.Revoke(ctx, tokens[2][3:19]); !errors.Is(err, auth.ErrNoToken) {
		t.Fatalf("revoke twice: %v", err)
	}
	var fe *lifecycle.FieldError
	if _, err := s.Revoke(ctx, "ABC"); !errors.As(err, &fe) || fe.Field != "id" {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := s.Revoke(ctx, tokens[0][3:19]); !errors.Is(err, auth.ErrLastAdmin) {
		t.Fatalf("last admin: %v", err)
	}
	if _, err := s.Authenticate(ctx, tokens[0]); err != nil {
		t.Fatalf("the last admin token after a refused revoke: %v", err)
	}
	second, err := s.Create(ctx, "bob", auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, tokens[0][3:19]); err != nil {
		t.Fatalf("an admin token beside another: %v", err)
	}
	if listed, err := s.List(ctx); err != nil || len(listed) != 1 || listed[0].ID != second[3:19] {
		t.Fatalf("left: %+v, %v", listed, err)
	}
}

// TestNewTokenShowsItsTimeAsKept: a token's description, answered once at
// its making, shows its times as every read of it does later, to the
// microsecond, on a clock that reads nanoseconds.
func TestNewTokenShowsItsTimeAsKept(t *testing.T) {
	t.Parallel()
	db := dbtest.Pool(t)
	s := auth.NewStore(db, func() time.Time { return time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC) })
	_, made, err := s.New(t.Context(), auth.Spec{Name: "erp-feed", Role: auth.RoleIngest, Lifetime: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.List(t.Context())
	if err != nil || len(list) != 1 {
		t.Fatalf("list %+v, %v", list, err)
	}
	if got := list[0]; !got.CreatedAt.Equal(made.CreatedAt) || made.CreatedAt.Nanosecond() != 123456000 || !got.ExpiresAt.Equal(*made.ExpiresAt) {
		t.Errorf("made %v until %v, kept %v until %v", made.CreatedAt, made.ExpiresAt, got.CreatedAt, got.ExpiresAt)
	}
}
