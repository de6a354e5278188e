package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestArchitectureListsImports holds the table of imports in
// docs/architecture.md to the code: each package's row names the
// packages of Waybill it imports, as go list reads them.
func TestArchitectureListsImports(t *testing.T) {
	const module = "github.com/waybill/waybill/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		var ours []string
		for _, imp := range strings.Fields(imports) {
			if name, ok := strings.CutPrefix(imp, module); ok {
				ours = append(ours, "`"+name+"`")
			}
		}
		deps := strings.Join(ours, ", ")
		if deps == "" {
			deps = "none"
		}
		want["`"+strings.TrimPrefix(pkg, module)+"`"] = deps
	}

	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| package | imports of Waybill |\n|---|---|\n")
	if !ok {
		t.Fatal("docs/architecture.md has no table of imports")
	}
	got := map[string]string{}
	for _, row := range strings.Split(table, "\n") {
		if !strings.HasPrefix(row, "| ") {
			break
		}
		cells := strings.Split(strings.Trim(row, "| "), " | ")
		if len(cells) == 2 {
			got[cells[0]] = cells[1]
		}
	}
	for pkg, deps := range want {
		if got[pkg] != deps {
			t.Errorf("docs/architecture.md: %s imports %q, the code %q", pkg, got[pkg], deps)
		}
	}
	for pkg := range got {
		if _, ok := want[pkg]; !ok {
			t.Errorf("docs/architecture.md lists %s, which is no package", pkg)
		}
	}
}
