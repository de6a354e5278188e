package schema_test

import (
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/schema"
)

// TestLockKeysDistinct type-checks lock.go and holds every constant of type
// LockKey, and of LockClass, apart from the others of its type, so a key
// added to the registry cannot take one already there.
func TestLockKeysDistinct(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "lock.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("schema", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok {
			continue
		}
		typ := c.Type().String()
		if typ != "schema.LockKey" && typ != "schema.LockClass" {
			continue
		}
		key := c.Val().ExactString()
		if seen[typ] == nil {
			seen[typ] = map[string]string{}
		}
		if other, dup := seen[typ][key]; dup {
			t.Errorf("%s and %s are both %s", other, name, key)
		}
		seen[typ][key] = name
	}
	if len(seen["schema.LockKey"]) < 8 || len(seen["schema.LockClass"]) < 2 {
		t.Fatalf("found %d keys and %d classes in lock.go: the registry moved?", len(seen["schema.LockKey"]), len(seen["schema.LockClass"]))
	}
}

// TestLockKeysOnlyInRegistry finds every advisory lock the code takes and
// checks that it names its key from the registry: no key is written
// anywhere but lock.go.
func TestLockKeysOnlyInRegistry(t *testing.T) {
	literal := regexp.MustCompile(`0x77617962696c6c|0x77616c6e|0x77647570`)
	takes := regexp.MustCompile(`pg_(try_)?advisory_(xact_)?lock`)
	named := regexp.MustCompile(`\b(schema\.)?(Key|Class)[A-Z]\w*`)
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			path == filepath.Join("..", "schema", "lock.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if literal.Match(src) {
			t.Errorf("%s writes an advisory-lock key of its own: declare it in schema/lock.go", path)
		}
		if takes.Match(src) && !named.Match(src) {
			t.Errorf("%s takes an advisory lock without a key from schema/lock.go", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLease holds a lease in one process's place and shows the other
// standing by, in its gauge, until the first gives it up or its session
// ends.
func TestLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dbtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := schema.NewLease(db, schema.KeyRetention, "retention", log, regA)
	b := schema.NewLease(db, schema.KeyRetention, "retention", log, regB)
	// A second lease of another loop on the same registry shares its vector.
	schema.NewLease(db, schema.KeyBulk, "bulk", log, regA)

	take := func(l *schema.Lease, want bool) {
		t.Helper()
		got, err := l.Take(ctx)
		if err != nil || got != want {
			t.Fatalf("Take = %v, %v; want %v", got, err, want)
		}
	}
	held := func(reg *prometheus.Registry, want float64) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if f.GetName() == "waybill_lease_held" && m.GetLabel()[0].GetValue() == "retention" {
					if got := m.GetGauge().GetValue(); got != want {
						t.Fatalf("waybill_lease_held{loop=retention} = %v, want %v", got, want)
					}
					return
				}
			}
		}
		t.Fatal("no waybill_lease_held{loop=retention}")
	}
	take(a, true)
	take(a, true)
	take(b, false)
	take(b, false)
	held(regA, 1)
	held(regB, 0)
	if got := strings.Count(logs.String(), "stands by"); got != 1 {
		t.Errorf("the log says %d times that a lease stands by, want once:\n%s", got, logs.String())
	}
	a.Release()
	a.Release()
	held(regA, 0)
	take(b, true)
	// A session that ends drops the lease; its holder finds that out.
	if err := b.Conn().Conn().Close(ctx); err != nil {
		t.Fatal(err)
	}
	take(a, true)
	take(b, false)
	a.Release()
}
