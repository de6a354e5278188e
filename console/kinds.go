package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/sources"
)

// configField is one field of a kind's configuration, as the forms show
// it. Its input is named config.<Key>, as the API names the field in a
// refusal, so a problem is shown under it.
type configField struct {
	// Key is the field's name in the configuration's JSON.
	Key   string
	Label string
	// Hint says what the field takes and its default.
	Hint string
	// Input is how it is written: text, number (a whole number), check
	// (a boolean), select (one of Options, the first the default), lines (an object of
	// strings, one "Name: value" a line), list (strings, comma-separated),
	// or json (an object, as JSON).
	Input   string
	Options []string
}

// targetKinds and sourceKinds are the configuration fields of each kind of
// target (package targets) and of source (package sources), in the
// order the forms show them. kinds_test.go checks that they are every
// field of every kind.
var (
	targetKinds = map[string][]configField{
		"http": {
			{Key: "url", Label: "URL", Input: "text", Hint: "Where attempts are sent: an absolute http:// or https:// URL. Required."},
			{Key: "method", Label: "Method", Input: "select", Options: []string{"POST", "PUT", "PATCH"}, Hint: "The request's method."},
			{Key: "headers", Label: "Headers", Input: "lines",
				Hint: "Sent with every attempt, one Name: value a line. A Content-Type here is used for payloads that have none."},
			{Key: "forward_headers", Label: "Forward message headers", Input: "list",
				Hint: "The message's headers sent on, comma-separated: names (x-tenant) or prefixes (x-request-*). Reserved ones never are."},
			{Key: "timeout", Label: "Request timeout", Input: "text", Hint: "A duration such as 10s; empty leaves it to the attempt timeout."},
			{Key: "tls_skip_verify", Label: "Accept any server certificate", Input: "check", Hint: "Off: the server's certificate is verified."},
			{Key: "propagate_baggage", Label: "Pass the message's baggage on", Input: "check",
				Hint: "With tracing on, each attempt carries the W3C baggage the message came with; off, it carries none."},
		},
		"file": {
			{Key: "dir", Label: "Directory", Input: "text", Hint: "Where each delivery's file is written: an absolute path. Required."},
			{Key: "extension", Label: "Extension", Input: "text", Hint: "Of the files, without the dot: 1 to 16 letters or digits. Default bin."},
			{Key: "overwrite", Label: "Overwrite", Input: "check",
				Hint: "An attempt may replace a file of the same name with other content; off, that fails the delivery."},
		},
	}
	sourceKinds = map[string][]configField{
		sources.KindDirectory: {
			{Key: "dir", Label: "Directory", Input: "text", Hint: "Where files are dropped: an absolute path. Required."},
			{Key: "pattern", Label: "Pattern", Input: "text", Hint: "The names of the files taken, such as *.xml. Default *."},
			{Key: "from", Label: "From", Input: "text", Hint: "The sender of every message. Required."},
			{Key: "to", Label: "To", Input: "text", Hint: "The receiver of every message. Required."},
			{Key: "content_type", Label: "Content type", Input: "text", Hint: "Of the messages. Default " + sources.DefaultContentType + "."},
			typeField, headersField,
			{Key: "interval", Label: "Interval", Input: "text", Hint: "Between two looks at the directory, from 10ms to 1h. Default 2s."},
			{Key: "settle", Label: "Settle", Input: "text",
				Hint: "How long a file must stay the same before it is taken, from 1ms to 1h. Default 2s."},
			{Key: "after", Label: "After", Input: "select", Options: []string{sources.AfterMove, sources.AfterDelete},
				Hint: "What becomes of a file once its message is stored."},
			{Key: "done_dir", Label: "Done directory", Input: "text", Hint: "Where files are moved, only with after move. Default <dir>/done."},
		},
		sources.KindInboxTable: {
			{Key: "database_url", Label: "Database URL", Input: "text",
				Hint: "The inbox's database: postgres://user:password@host:port/database or a key=value string. Required. " +
					"A password is shown as " + redact.Mask + ": left so, the stored one is kept."},
			{Key: "table", Label: "Table", Input: "text", Hint: "name or schema.name, as the catalog holds it. Required."},
			{Key: "id_column", Label: "Id column", Input: "text", Hint: "An integer column the upstream fills in ascending order. Required."},
			{Key: "payload_column", Label: "Payload column", Input: "text", Hint: "The message body. Required."},
			{Key: "from_column", Label: "From column", Input: "text", Hint: "The sender. Required."},
			{Key: "to_column", Label: "To column", Input: "text", Hint: "The receiver. Required."},
			{Key: "ordering_key_column", Label: "Ordering key column", Input: "text", Hint: "Each message's ordering key; empty for none."},
			{Key: "processed_column", Label: "Processed column", Input: "text", Hint: "Marked once a row is taken in. Required."},
			{Key: "processed_value", Label: "Processed value", Input: "text", Hint: "The marker written. Default: the time of the write."},
			{Key: "content_type", Label: "Content type", Input: "text", Hint: "Of the messages. Default " + sources.DefaultContentType + "."},
			typeField, headersField,
			{Key: "interval", Label: "Interval", Input: "text", Hint: "Between two reads that found nothing, from 10ms to 1h. Default 1s."},
			{Key: "batch", Label: "Batch", Input: "number", Hint: fmt.Sprintf("Rows a read takes at most, from 1 to %d. Default %d.", sources.MaxBatch, sources.DefaultBatch)},
			{Key: "max_commit_delay", Label: "Longest commit delay", Input: "text",
				Hint: "How long a missing id may still be an upstream transaction, from 1s to 720h. Default 5m0s."},
			{Key: "force_marker_after", Label: "Force a marker after", Input: "text",
				Hint: "How long a marker that cannot be written may be put off, from 1s to 8760h. Default 24h0m0s."},
		},
		sources.KindWebhook: {
			{Key: sources.VerifyField, Label: "Verify", Input: "json",
				Hint: `How a request's signature is checked, as JSON: {"scheme": "standard-webhooks", "github", "stripe" or "hmac", ` +
					`"secret": "…"} or "secrets": [...] for several. Required. A secret is shown as ` + redact.Mask +
					": left so, the stored one is kept."},
			{Key: "from", Label: "From", Input: "text", Hint: "The sender of every message. Default the source's name."},
			{Key: "to", Label: "To", Input: "text", Hint: "The receiver of every message. Default *."},
			{Key: "tolerance", Label: "Tolerance", Input: "text",
				Hint: "How far a signed timestamp may be from now, from 1s to 1h. Default 5m0s."},
			{Key: "headers", Label: "Headers kept", Input: "list",
				Hint: "The request's headers the message keeps, comma-separated: names (x-tenant) or prefixes (x-request-*). Reserved ones and credentials never."},
			{Key: "type", Label: "Type", Input: "text", Hint: "The message's type when the request names none, such as shop.order."},
		},
	}
	// typeField and headersField are a polled source's type and headers,
	// the same for every message it takes.
	typeField    = configField{Key: "type", Label: "Type", Input: "text", Hint: "Of every message, such as invoice.created; empty for none."}
	headersField = configField{Key: "headers", Label: "Headers", Input: "lines",
		Hint: "Of every message, one Name: value a line, for routes to match and targets to forward."}
)

// kindNames is the kinds of a registry, in name order.
func kindNames(kinds map[string][]configField) []string { return slices.Sorted(maps.Keys(kinds)) }

// configValues are the fields of a configuration as the form's inputs
// hold them, by key.
type configValues map[string]string

// valuesOf is the configuration as the form shows it; a field it does not
// have is empty.
func valuesOf(fields []configField, config json.RawMessage) configValues {
	var object map[string]any
	d := json.NewDecoder(bytes.NewReader(config))
	d.UseNumber()
	if d.Decode(&object) != nil {
		return configValues{}
	}
	vs := configValues{}
	for _, f := range fields {
		if v, ok := object[f.Key]; ok && f.Input == "json" {
			b, _ := json.MarshalIndent(v, "", "  ") // what was decoded encodes
			vs[f.Key] = string(b)
			continue
		}
		switch v := object[f.Key].(type) {
		case string:
			vs[f.Key] = v
		case json.Number:
			vs[f.Key] = v.String()
		case bool:
			if v {
				vs[f.Key] = "on"
			}
		case []any:
			var items []string
			for _, item := range v {
				items = append(items, fmt.Sprint(item))
			}
			vs[f.Key] = strings.Join(items, ", ")
		case map[string]any:
			var lines []string
			for _, name := range slices.Sorted(maps.Keys(v)) {
				lines = append(lines, fmt.Sprintf("%s: %v", name, v[name]))
			}
			vs[f.Key] = strings.Join(lines, "\n")
		}
	}
	return vs
}

// readValues reads the configuration's inputs of a form.
func readValues(fields []configField, form url.Values) configValues {
	vs := configValues{}
	for _, f := range fields {
		v := form.Get("config." + f.Key)
		if f.Input != "lines" {
			v = strings.TrimSpace(v)
		}
		vs[f.Key] = v
	}
	return vs
}

// config is the configuration the values describe, as the API's JSON
// would carry it: a field left empty is left out, so it takes its kind's
// default. A value that cannot be written so is a *lifecycle.FieldError
// named as the API names the field.
func (vs configValues) config(fields []configField) (json.RawMessage, error) {
	object := map[string]any{}
	var errs []error
	for _, f := range fields {
		v, name := vs[f.Key], "config."+f.Key
		switch {
		case f.Input == "check":
			if v == "on" {
				object[f.Key] = true
			}
		case strings.TrimSpace(v) == "":
		case f.Input == "json":
			var o map[string]json.RawMessage
			if err := json.Unmarshal([]byte(v), &o); err != nil || o == nil {
				errs = append(errs, &lifecycle.FieldError{Field: name, Problem: "must be a JSON object, such as {\"scheme\": \"github\", \"secret\": \"…\"}"})
				continue
			}
			object[f.Key] = json.RawMessage(v)
		case f.Input == "list":
			var items []string
			for item := range strings.SplitSeq(v, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			object[f.Key] = items
		case f.Input == "number":
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, &lifecycle.FieldError{Field: name, Problem: fmt.Sprintf("must be a whole number, not %q", v)})
			}
			object[f.Key] = n
		case f.Input == "lines":
			lines := map[string]string{}
			for i, line := range strings.Split(v, "\n") {
				if strings.TrimSpace(line) == "" {
					continue
				}
				k, value, ok := strings.Cut(line, ":")
				k = strings.TrimSpace(k)
				if _, twice := lines[k]; !ok || k == "" || twice {
					errs = append(errs, &lifecycle.FieldError{Field: name,
						Problem: fmt.Sprintf("line %d, %q: write one Name: value a line, each name once", i+1, strings.TrimSpace(line))})
					continue
				}
				lines[k] = strings.TrimSpace(value)
			}
			object[f.Key] = lines
		default:
			object[f.Key] = v
		}
	}
	raw, err := json.Marshal(object)
	if err != nil {
		return nil, fmt.Errorf("write configuration: %w", err)
	}
	return raw, invalid(errs...)
}

// configInput is one input of a configuration's form.
type configInput struct {
	field
	Input   string
	Options []option
	Checked bool
}

// configView is the fieldset of a kind's configuration in a form.
type configView struct {
	Legend string
	Inputs []configInput
	// Others are the problems of a refusal in the configuration that no
	// input is named for.
	Others []string
}

// configViewOf is the fieldset of a configuration of fields holding the
// values, with the problems of a refusal under each input.
func configViewOf(kind string, fields []configField, vs configValues, problem *errorView) configView {
	v := configView{Legend: "Configuration of the " + kind + " kind"}
	known := map[string]bool{}
	for _, f := range fields {
		in := configInput{field: fieldOf("config."+f.Key, f.Label, vs[f.Key], f.Hint, problem), Input: f.Input, Checked: vs[f.Key] == "on"}
		for _, o := range f.Options {
			in.Options = append(in.Options, option{Value: o, Label: o, Selected: o == vs[f.Key] || vs[f.Key] == "" && o == f.Options[0]})
		}
		v.Inputs = append(v.Inputs, in)
		known[in.Name] = true
	}
	if problem != nil {
		for _, p := range problem.Fields {
			if (p.Field == "config" || strings.HasPrefix(p.Field, "config.")) && !known[p.Field] {
				v.Others = append(v.Others, p.Field+": "+p.Problem)
			}
		}
	}
	return v
}
