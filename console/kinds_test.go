package console

import (
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
	"github.com/waybill/waybill/targets"
)

// allowedFields are the configuration fields a kind's check takes, read
// from its refusal of a field it does not know: the kind itself says
// which they are.
func allowedFields(t *testing.T, check func(json.RawMessage) (json.RawMessage, error)) []string {
	t.Helper()
	_, err := check(json.RawMessage(`{"no_such_field": 1}`))
	var fe *lifecycle.FieldError
	for _, e := range flatten(err) {
		if errors.As(e, &fe) && fe.Field == "config.no_such_field" {
			_, list, ok := strings.Cut(fe.Problem, "allowed are ")
			if ok {
				return strings.Split(list, ", ")
			}
		}
	}
	t.Fatalf("the kind's check did not name its fields: %v", err)
	return nil
}

func flatten(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

func keys(fields []configField) []string {
	var out []string
	for _, f := range fields {
		out = append(out, f.Key)
	}
	return slices.Sorted(slices.Values(out))
}

// TestEveryKindHasItsForm checks that the forms offer every kind of target
// and of source, each with every field of its configuration: a field the
// form lacked would be dropped by an edit, which replaces the whole
// configuration.
func TestEveryKindHasItsForm(t *testing.T) {
	if got, want := kindNames(targetKinds), targets.Names(); !slices.Equal(got, want) {
		t.Errorf("target forms for %v, kinds %v", got, want)
	}
	if got, want := kindNames(sourceKinds), sources.Names(); !slices.Equal(got, want) {
		t.Errorf("source forms for %v, kinds %v", got, want)
	}
	for _, name := range targets.Names() {
		k, _ := targets.Lookup(name)
		if got, want := keys(targetKinds[name]), allowedFields(t, k.Check); !slices.Equal(got, want) {
			t.Errorf("target kind %s: the form has %v, the kind %v", name, got, want)
		}
	}
	for _, name := range sources.Names() {
		check := func(raw json.RawMessage) (json.RawMessage, error) {
			s, err := sources.Prepare(lifecycle.Source{Name: "probe", Kind: name, Config: raw})
			return s.Config, err
		}
		if got, want := keys(sourceKinds[name]), allowedFields(t, check); !slices.Equal(got, want) {
			t.Errorf("source kind %s: the form has %v, the kind %v", name, got, want)
		}
	}
}

// TestConfigFormRoundTrip checks that a configuration shown in a form and
// sent back unchanged is the same configuration, and that a field left
// empty is left out, to take its default.
func TestConfigFormRoundTrip(t *testing.T) {
	fields := targetKinds["http"]
	stored := json.RawMessage(`{"url":"https://erp.example/in","method":"PUT","headers":{"Authorization":"Bearer x: y","X-A":"1"},"timeout":"10s","tls_skip_verify":true}`)
	form := url.Values{}
	for k, v := range valuesOf(fields, stored) {
		form.Set("config."+k, v)
	}
	got, err := readValues(fields, form).config(fields)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	json.Unmarshal(stored, &a)
	json.Unmarshal(got, &b)
	if !maps.EqualFunc(a, b, func(x, y any) bool { return jsonText(x) == jsonText(y) }) {
		t.Errorf("sent back, %s reads %s", stored, got)
	}

	got, err = readValues(fields, url.Values{"config.url": {" http://a/ "}, "config.method": {"POST"}}).config(fields)
	if err != nil || string(got) != `{"method":"POST","url":"http://a/"}` {
		t.Errorf("a form with two fields reads %s, %v", got, err)
	}
	_, err = readValues(fields, url.Values{"config.headers": {"X-A: 1\nnot a header"}}).config(fields)
	if err == nil || !strings.Contains(err.Error(), "config.headers: line 2") {
		t.Errorf("a header without its colon: %v", err)
	}
	batch := sourceKinds[sources.KindInboxTable]
	_, err = readValues(batch, url.Values{"config.batch": {"many"}}).config(batch)
	if err == nil || !strings.Contains(err.Error(), `config.batch: must be a whole number, not "many"`) {
		t.Errorf("a batch that is not a number: %v", err)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
