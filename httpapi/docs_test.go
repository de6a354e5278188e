package httpapi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/waybill/waybill/httpapi"
)

// TestErrorCodesDocumented: the error table of docs/rest.md lists every
// code the package declares (its Code constants, read from the source) and
// no other, and the tests' list of codes, which the OpenAPI test uses, is
// the same set.
func TestErrorCodesDocumented(t *testing.T) {
	t.Parallel()
	var declared []string
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, id := range v.Names {
					if !strings.HasPrefix(id.Name, "Code") || i >= len(v.Values) {
						continue
					}
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						code, _ := strconv.Unquote(lit.Value)
						declared = append(declared, code)
					}
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("no Code constants found in the source")
	}
	doc, err := os.ReadFile("../docs/rest.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| [45]\\d\\d \\| `([A-Z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(declared)
	slices.Sort(documented)
	if !slices.Equal(declared, documented) {
		t.Errorf("docs/rest.md's error table lists %v; the package declares %v", documented, declared)
	}
	listed := slices.Sorted(slices.Values(httpapi.Codes))
	if !slices.Equal(declared, listed) {
		t.Errorf("httpapi.Codes is %v; the package declares %v", listed, declared)
	}
}
