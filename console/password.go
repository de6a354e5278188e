package console

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// passwordMask stands for a password the console does not show.
const passwordMask = "xxxxx"

// The passwords a PostgreSQL connection string may hold beside a URL's
// user info: a URL's query parameter, a key=value string's password key
// (its value quoted or not).
var (
	queryPassword    = regexp.MustCompile(`[?&]password=([^&#]*)`)
	keyValuePassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)`)
)

// passwordSpans are where the passwords of a PostgreSQL connection string
// (a postgres:// URL or key=value pairs, as pgx reads them) are, each as
// its start and end.
func passwordSpans(dsn string) [][2]int {
	var spans [][2]int
	add := func(matches [][]int) {
		for _, m := range matches {
			if m[3] > m[2] {
				spans = append(spans, [2]int{m[2], m[3]})
			}
		}
	}
	rest, isURL := strings.CutPrefix(dsn, "postgres://")
	if !isURL {
		rest, isURL = strings.CutPrefix(dsn, "postgresql://")
	}
	if !isURL {
		add(keyValuePassword.FindAllStringSubmatchIndex(dsn, -1))
		return spans
	}
	// The user info ends at the authority's last '@'; the password is
	// what follows its first ':'.
	from := len(dsn) - len(rest)
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if colon := strings.IndexByte(authority[:at], ':'); colon >= 0 && colon+1 < at {
			spans = append(spans, [2]int{from + colon + 1, from + at})
		}
	}
	add(queryPassword.FindAllStringSubmatchIndex(dsn, -1))
	return spans
}

// maskPassword is the connection string with each password written as
// passwordMask, so a page may show where the source connects.
func maskPassword(dsn string) string {
	spans := passwordSpans(dsn)
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(dsn[last:s[0]])
		b.WriteString(passwordMask)
		last = s[1]
	}
	b.WriteString(dsn[last:])
	return b.String()
}

// holdsMask reports whether a password of the connection string is
// passwordMask: one copied from a page, not the real one.
func holdsMask(dsn string) bool {
	return slices.ContainsFunc(passwordSpans(dsn), func(s [2]int) bool { return dsn[s[0]:s[1]] == passwordMask })
}

// databaseURL is the config field that holds a connection string.
const databaseURL = "database_url"

// showConfig is a source's configuration indented for a page, the
// password of its database_url masked. A configuration that is not a JSON
// object is shown as it is: it has no field to hide.
func showConfig(raw json.RawMessage) string {
	var fields map[string]json.RawMessage
	var dsn string
	if json.Unmarshal(raw, &fields) != nil || json.Unmarshal(fields[databaseURL], &dsn) != nil || maskPassword(dsn) == dsn {
		return indent(raw)
	}
	fields[databaseURL], _ = json.Marshal(maskPassword(dsn))
	out, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return indent(raw)
	}
	return string(out)
}

// keepPassword is the configuration an edit form sent, with its
// database_url put back as it is stored when the form left it as the page
// showed it (masked). A database_url changed but still holding the mask is
// refused: its password is unknown.
func keepPassword(sent, stored json.RawMessage) (json.RawMessage, error) {
	var fields, was map[string]json.RawMessage
	var dsn, storedDSN string
	if json.Unmarshal(sent, &fields) != nil || json.Unmarshal(fields[databaseURL], &dsn) != nil {
		return sent, nil // the kind's check names what is wrong
	}
	if json.Unmarshal(stored, &was) == nil && json.Unmarshal(was[databaseURL], &storedDSN) == nil &&
		storedDSN != dsn && maskPassword(storedDSN) == dsn {
		fields[databaseURL] = was[databaseURL]
		return json.Marshal(fields)
	}
	if holdsMask(dsn) {
		return sent, invalidField("config."+databaseURL, "holds the hidden password "+passwordMask+
			": to keep the stored connection leave it as it was shown; to change it, write it whole, with its password")
	}
	return sent, nil
}
