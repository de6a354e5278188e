package sources

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/waybill/waybill/lifecycle"
)

// DatabaseURLField is the configuration field that holds an inbox's
// connection string, whose passwords are masked where it is shown
// (package redact).
const DatabaseURLField = "database_url"

// InboxConfig is the configuration of an inbox_table source: a table of
// another PostgreSQL database that an upstream system inserts rows into.
// Waybill reads it and writes only the processed marker of the rows it
// took; it never changes the table's structure.
type InboxConfig struct {
	// DatabaseURL is the inbox's database: a postgres:// URL or a
	// key=value connection string. Required.
	DatabaseURL string `json:"database_url"`
	// Table is the inbox table, as name or schema.name, written as the
	// catalog holds it (lower case for a name created unquoted). Required.
	Table string `json:"table"`
	// IDColumn is an integer column whose values the upstream draws in
	// ascending order (a sequence or identity): rows are read in its
	// order. Required.
	IDColumn string `json:"id_column"`
	// PayloadColumn is the message body: bytea as it is, any other type as
	// its text. Required.
	PayloadColumn string `json:"payload_column"`
	// FromColumn and ToColumn hold the message's parties. Required.
	FromColumn string `json:"from_column"`
	ToColumn   string `json:"to_column"`
	// OrderingKeyColumn, when set, is the column of each message's
	// ordering key (as its text): its deliveries to fifo targets keep the
	// order of their key's lane. NULL or empty is no key.
	OrderingKeyColumn string `json:"ordering_key_column,omitempty"`
	// ProcessedColumn is the column Waybill marks a row it took in, where
	// it is empty. Required.
	ProcessedColumn string `json:"processed_column"`
	// ProcessedValue is the marker written, cast to the column's type.
	// Default: the time of the write, which suits a timestamp or text
	// column.
	ProcessedValue string `json:"processed_value,omitempty"`
	// ContentType is the messages' content type. Default
	// application/octet-stream.
	ContentType string `json:"content_type"`
	// Type and Headers are every message's type and headers, for routes
	// to match and targets to forward; none by default.
	Type    string            `json:"type,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Interval is the time between two reads when the last one found
	// nothing more to take. Default 1 s.
	Interval lifecycle.Duration `json:"interval"`
	// Batch bounds the rows one read takes. Default 500, from 1 to 10000.
	Batch int `json:"batch"`
	// MaxCommitDelay is how long an id missing between rows that exist may
	// still be an upstream transaction not yet committed; past it, the id
	// is passed as a permanent hole. Default 5 min.
	MaxCommitDelay lifecycle.Duration `json:"max_commit_delay"`
	// ForceMarkerAfter is how long the back-off of a marker that cannot be
	// written may delay it; past it, the marker is tried at every read.
	// Default 24 h.
	ForceMarkerAfter lifecycle.Duration `json:"force_marker_after"`
}

// The bounds of InboxConfig.Batch.
const (
	DefaultBatch = 500
	MaxBatch     = 10000
)

func (c *InboxConfig) check(string) error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, &lifecycle.FieldError{Field: "config.database_url", Problem: "is required"})
	} else if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
		// The parser's message may quote the URL, password and all.
		errs = append(errs, &lifecycle.FieldError{Field: "config.database_url",
			Problem: "is not a PostgreSQL URL (postgres://user:password@host:port/database) or connection string"})
	}
	if _, err := TableIdentifier(c.Table); err != nil {
		errs = append(errs, &lifecycle.FieldError{Field: "config.table", Problem: err.Error()})
	}
	for _, col := range []struct {
		field, name string
		required    bool
	}{
		{"id_column", c.IDColumn, true}, {"payload_column", c.PayloadColumn, true},
		{"from_column", c.FromColumn, true}, {"to_column", c.ToColumn, true},
		{"ordering_key_column", c.OrderingKeyColumn, false}, {"processed_column", c.ProcessedColumn, true},
	} {
		if col.name == "" && !col.required {
			continue
		}
		if !isIdentifier(col.name) {
			errs = append(errs, &lifecycle.FieldError{Field: "config." + col.field, Problem: identifierProblem(col.name)})
		}
	}
	if c.ProcessedColumn != "" && c.ProcessedColumn == c.IDColumn {
		errs = append(errs, &lifecycle.FieldError{Field: "config.processed_column", Problem: "must not be the id column"})
	}
	if strings.ContainsRune(c.ProcessedValue, 0) {
		errs = append(errs, &lifecycle.FieldError{Field: "config.processed_value", Problem: "must not contain NUL"})
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.Batch < 1 || c.Batch > MaxBatch {
		errs = append(errs, &lifecycle.FieldError{Field: "config.batch", Problem: fmt.Sprintf("must be from 1 to %d, got %d", MaxBatch, c.Batch)})
	}
	errs = append(errs, checkContentType(&c.ContentType), checkStamp(c.Type, &c.Headers),
		checkDuration("interval", &c.Interval, time.Second, minInterval, maxInterval),
		checkDuration("max_commit_delay", &c.MaxCommitDelay, 5*time.Minute, time.Second, 720*time.Hour),
		checkDuration("force_marker_after", &c.ForceMarkerAfter, 24*time.Hour, time.Second, 8760*time.Hour))
	return errors.Join(errs...)
}

// Inbox reads the configuration of a prepared inbox_table source.
func Inbox(s lifecycle.Source) (InboxConfig, error) {
	return read[InboxConfig](s, KindInboxTable)
}

// TableIdentifier is a table's name, name or schema.name, quoted for SQL.
func TableIdentifier(table string) (pgx.Identifier, error) {
	parts := strings.Split(table, ".")
	if table == "" || len(parts) > 2 {
		return nil, fmt.Errorf("%q is not a table: write name or schema.name", table)
	}
	for _, p := range parts {
		if !isIdentifier(p) {
			return nil, errors.New(identifierProblem(p))
		}
	}
	return pgx.Identifier(parts), nil
}

// isIdentifier reports a plain SQL name: 1 to 63 of letters, digits, '_'
// and '$', starting with a letter or '_'.
func isIdentifier(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || c == '$')) {
			return false
		}
	}
	return true
}

func identifierProblem(s string) string {
	return fmt.Sprintf("%q is not a name: use 1 to 63 of letters, digits, '_' and '$', starting with a letter or '_'", s)
}
