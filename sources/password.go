package sources

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	"github.com/waybill/waybill/journal"
)

// PasswordMask stands for a password a reader is not shown.
const PasswordMask = "xxxxx"

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

// MaskPassword is the connection string with each password written as
// PasswordMask, so that where a source connects may be shown.
func MaskPassword(dsn string) string {
	spans := passwordSpans(dsn)
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(dsn[last:s[0]])
		b.WriteString(PasswordMask)
		last = s[1]
	}
	b.WriteString(dsn[last:])
	return b.String()
}

// HoldsMask reports whether a password of the connection string is
// PasswordMask: one copied from what was shown, not the real one.
func HoldsMask(dsn string) bool {
	return slices.ContainsFunc(passwordSpans(dsn), func(s [2]int) bool { return dsn[s[0]:s[1]] == PasswordMask })
}

// DatabaseURLField is the configuration field that holds a connection
// string.
const DatabaseURLField = "database_url"

// MaskConfig is a source's configuration with the password of its
// database_url masked, and whether there was one to mask. A configuration
// that is not a JSON object, or has no password, comes back as it is.
func MaskConfig(raw json.RawMessage) (json.RawMessage, bool) {
	var fields map[string]json.RawMessage
	var dsn string
	if json.Unmarshal(raw, &fields) != nil || json.Unmarshal(fields[DatabaseURLField], &dsn) != nil || MaskPassword(dsn) == dsn {
		return raw, false
	}
	fields[DatabaseURLField], _ = json.Marshal(MaskPassword(dsn))
	out, err := json.Marshal(fields)
	if err != nil {
		return raw, false
	}
	return out, true
}

// MaskPayload is p with a source definition's database_url password
// masked (MaskConfig), for readers of the journal who do not write the
// definitions; any other payload comes back as it is.
func MaskPayload(p journal.Payload) journal.Payload {
	switch p := p.(type) {
	case *journal.SourceCreated:
		masked := *p
		masked.Source.Config, _ = MaskConfig(p.Source.Config)
		return &masked
	case *journal.SourceUpdated:
		masked := *p
		masked.Source.Config, _ = MaskConfig(p.Source.Config)
		return &masked
	}
	return p
}
