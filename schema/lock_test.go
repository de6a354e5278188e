package schema_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/waybill/waybill/internal/dbtest"
	"github.com/waybill/waybill/internal/testpoll"
	"github.com/waybill/waybill/schema"
)

// TestLockKeysDistinct reads lock.go and holds every constant declared of
// type LockKey, and of LockClass, apart from the others of its type, so a
// key added to the registry cannot take one already there.
func TestLockKeysDistinct(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "lock.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[uint64]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			typ, ok := vs.Type.(*ast.Ident)
			if !ok || typ.Name != "LockKey" && typ.Name != "LockClass" {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s is not a literal: write every key as one", name.Name)
				}
				v, err := strconv.ParseUint(lit.Value, 0, 64)
				if err != nil {
					t.Fatalf("%s: %v", name.Name, err)
				}
				if seen[typ.Name] == nil {
					seen[typ.Name] = map[uint64]string{}
				}
				if other, dup := seen[typ.Name][v]; dup {
					t.Errorf("%s and %s are both %#x", other, name.Name, v)
				}
				seen[typ.Name][v] = name.Name
			}
		}
	}
	if len(seen["LockKey"]) < 8 || len(seen["LockClass"]) < 3 {
		t.Fatalf("found %d keys and %d classes in lock.go: the registry moved?", len(seen["LockKey"]), len(seen["LockClass"]))
	}
}

// TestLockKeysOnlyInRegistry finds every advisory lock the code takes and
// checks that it names its key from the registry: no key is written
// anywhere but lock.go.
func TestLockKeysOnlyInRegistry(t *testing.T) {
	literal := regexp.MustCompile(`0x77617962696c6c|0x77616c6e|0x77647570|0x77746774`)
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
	db := dbtest.Pool(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := schema.NewLease(db, schema.KeyRetention, "retention", log, regA)
	b := schema.NewLease(db, schema.KeyRetention, "retention", log, regB)
	// A lease holds a pooled connection: give it back before the pool
	// closes, which waits for every connection, even after a failure.
	t.Cleanup(func() { a.Release(); b.Release() })
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
	// A session that ends drops the lease, once the server has seen it
	// end; its holder finds that out.
	if err := b.Conn().Conn().Close(ctx); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "the other process takes the lease of a session that ended", func() bool {
		got, err := a.Take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	})
	take(b, false)
	a.Release()
}
