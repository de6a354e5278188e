package console_test

import (
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// contrast is the WCAG 2 contrast ratio of two colours #rrggbb.
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)
}

// luminance is the relative luminance of a colour #rrggbb.
func luminance(hex string) float64 {
	var l float64
	for i, weight := range []float64{0.2126, 0.7152, 0.0722} {
		v, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		if err != nil {
			panic(hex)
		}
		c := float64(v) / 255
		if c <= 0.04045 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += weight * c
	}
	return l
}

func TestContrast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want float64
	}{
		{"#000000", "#ffffff", 21},
		{"#ffffff", "#ffffff", 1},
		{"#777777", "#ffffff", 4.48},
		{"#0550ae", "#ffffff", 7.59},
	} {
		if got := contrast(tc.a, tc.b); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("contrast(%s, %s) = %.2f, want %.2f", tc.a, tc.b, got, tc.want)
		}
	}
}

// The WCAG AA minimums: text, and the parts of controls and focus rings
// that show where they are.
const (
	textAA    = 4.5
	nonTextAA = 3
)

// colourPairs are the foreground and background colours the stylesheet
// puts together, each with the contrast it needs. Every badge's -fg on its
// -bg is added by the test.
var colourPairs = []struct {
	fg, bg string
	min    float64
}{
	{"page-fg", "page-bg", textAA},
	{"page-fg", "card-bg", textAA},
	{"muted-fg", "page-bg", textAA},
	{"muted-fg", "card-bg", textAA},
	{"link-fg", "page-bg", textAA},
	{"link-fg", "card-bg", textAA},
	{"button-fg", "button-bg", textAA},
	{"danger-fg", "danger-bg", textAA},
	{"notice-fg", "notice-bg", textAA},
	{"alert-fg", "alert-bg", textAA},
	{"code-fg", "code-bg", textAA},
	{"focus", "page-bg", nonTextAA},
	{"focus", "card-bg", nonTextAA},
	{"control-line", "page-bg", nonTextAA},
	{"alert-fg", "page-bg", nonTextAA}, // the border of an invalid input
	// The charts' marks, on the page and on a card.
	{"chart-ok", "page-bg", nonTextAA}, {"chart-ok", "card-bg", nonTextAA},
	{"chart-info", "page-bg", nonTextAA}, {"chart-info", "card-bg", nonTextAA},
	{"chart-warn", "page-bg", nonTextAA}, {"chart-warn", "card-bg", nonTextAA},
	{"chart-bad", "page-bg", nonTextAA}, {"chart-bad", "card-bg", nonTextAA},
	{"chart-other", "page-bg", nonTextAA}, {"chart-other", "card-bg", nonTextAA},
	{"chart-neutral", "page-bg", nonTextAA}, {"chart-neutral", "card-bg", nonTextAA},
}

// decorative colours separate what is already apart; they carry nothing
// a reader must see.
var decorative = []string{"line"}

// themes reads the colours of the light theme (:root) and the dark one
// (the :root of the prefers-color-scheme: dark block) from the stylesheet.
func themes(t *testing.T) (css string, light, dark map[string]string) {
	t.Helper()
	data, err := os.ReadFile("static/console.css")
	if err != nil {
		t.Fatal(err)
	}
	css = string(data)
	block := func(from string) string {
		i := strings.Index(css, from)
		if i < 0 {
			t.Fatalf("the stylesheet has no %q", from)
		}
		rest := css[i+len(from):]
		j := strings.Index(rest, "}")
		return rest[:j]
	}
	colour := regexp.MustCompile(`--([a-z-]+):\s*([^;]+);`)
	read := func(b string) map[string]string {
		out := map[string]string{}
		for _, m := range colour.FindAllStringSubmatch(b, -1) {
			out[m[1]] = strings.TrimSpace(m[2])
		}
		return out
	}
	light = read(block(":root {"))
	dark = read(block("@media (prefers-color-scheme: dark) {\n\t:root {"))
	return css, light, dark
}

func TestEveryColourPairMeetsAA(t *testing.T) {
	t.Parallel()
	css, light, dark := themes(t)
	hex := regexp.MustCompile(`^#[0-9a-f]{6}$`)
	pairs := slices.Clone(colourPairs)
	for name := range light {
		if tone, ok := strings.CutSuffix(name, "-fg"); ok && strings.HasPrefix(tone, "badge-") {
			pairs = append(pairs, struct {
				fg, bg string
				min    float64
			}{name, tone + "-bg", textAA})
		}
	}
	used := map[string]bool{}
	for _, name := range decorative {
		used[name] = true
	}
	for _, p := range pairs {
		used[p.fg], used[p.bg] = true, true
	}
	for theme, colours := range map[string]map[string]string{"light": light, "dark": dark} {
		for name, v := range colours {
			if !hex.MatchString(v) {
				t.Errorf("%s --%s is %q: write every colour as #rrggbb", theme, name, v)
			}
			if !used[name] {
				t.Errorf("%s --%s is in no pair the test checks: add it to colourPairs or decorative", theme, name)
			}
		}
		for _, p := range pairs {
			fg, bg := colours[p.fg], colours[p.bg]
			if fg == "" || bg == "" {
				t.Errorf("%s theme lacks --%s or --%s", theme, p.fg, p.bg)
				continue
			}
			if got := contrast(fg, bg); got < p.min {
				t.Errorf("%s: --%s %s on --%s %s has contrast %.2f, AA needs %.1f", theme, p.fg, fg, p.bg, bg, got, p.min)
			}
		}
	}
	if len(light) != len(dark) {
		t.Errorf("the light theme has %d colours, the dark one %d", len(light), len(dark))
	}
	// Every colour the rules use is one of the theme's.
	for _, m := range regexp.MustCompile(`var\(--([a-z-]+)\)`).FindAllStringSubmatch(css, -1) {
		if _, ok := light[m[1]]; !ok {
			t.Errorf("the stylesheet uses --%s, which no theme defines", m[1])
		}
	}
	// And no rule writes a colour of its own.
	rules := css[strings.Index(css, "*, *::before"):]
	if m := regexp.MustCompile(`#[0-9a-fA-F]{3,8}\b|rgb\(|hsl\(`).FindString(rules); m != "" {
		t.Errorf("a rule writes the colour %s: use a theme's custom property", m)
	}
}
