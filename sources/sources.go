package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// The kinds of source.
const (
	KindDirectory  = "directory"
	KindInboxTable = "inbox_table"
	KindWebhook    = "webhook"
)

// Polled reports whether Waybill polls a source of the kind; a webhook
// source is posted to instead.
func Polled(kind string) bool { return kind != KindWebhook }

// The prefixes of the idempotency keys the sources give their messages:
// an inbox row's is RowKeyPrefix and its id, a file's FileKeyPrefix and a
// hash, a webhook's WebhookKeyPrefix and the sender's id of the delivery
// (keys are held per source, so one sender's ids cannot meet another
// source's). The REST API refuses keys that start with them, so no sender
// can take a key a source will use, even one of a source made later.
const (
	RowKeyPrefix     = "row:"
	FileKeyPrefix    = "file:"
	WebhookKeyPrefix = "webhook:"
)

// ReservedKeyPrefixes are the prefixes ReservedKey refuses.
var ReservedKeyPrefixes = []string{RowKeyPrefix, FileKeyPrefix, WebhookKeyPrefix}

// ReservedKey reports whether key has the prefix of a source's own key.
func ReservedKey(key string) bool {
	return slices.ContainsFunc(ReservedKeyPrefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}

// kinds maps each kind to the check of its configuration: it reads the
// configuration of the named source, fills its defaults and checks it,
// and returns it with the defaults written in.
var kinds = map[string]func(source string, raw json.RawMessage) (json.RawMessage, error){
	KindDirectory:  checkConfig[DirectoryConfig],
	KindInboxTable: checkConfig[InboxConfig],
	KindWebhook:    checkConfig[WebhookConfig],
}

// Names returns the kinds, in name order.
func Names() []string { return slices.Sorted(maps.Keys(kinds)) }

// Prepare fills the source's defaults, those of its kind's configuration
// included, and checks all of it; every problem is a *lifecycle.FieldError,
// joined.
func Prepare(s lifecycle.Source) (lifecycle.Source, error) {
	if len(s.Config) == 0 {
		s.Config = json.RawMessage(`{}`)
	}
	check, ok := kinds[s.Kind]
	if !ok {
		err := &lifecycle.FieldError{Field: "kind",
			Problem: fmt.Sprintf("%q is not a source kind: allowed are %s", s.Kind, strings.Join(Names(), ", "))}
		return s, errors.Join(err, without(s.Validate(), "kind"))
	}
	config, err := check(s.Name, s.Config)
	if err != nil {
		return s, errors.Join(without(s.Validate(), "config"), err)
	}
	s.Config = config
	return s, s.Validate()
}

// config is a kind's configuration: check fills the defaults, some of
// which are the source's name, and returns every problem joined.
type config interface{ check(source string) error }

// checkConfig reads raw as a C, fills its defaults, checks it and returns
// it with the defaults written in.
func checkConfig[C any, P interface {
	*C
	config
}](source string, raw json.RawMessage) (json.RawMessage, error) {
	c := P(new(C))
	if err := targets.ReadConfig(raw, c, func() error { return c.check(source) }); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// read decodes a prepared source's configuration.
func read[C any](s lifecycle.Source, kind string) (C, error) {
	var c C
	if s.Kind != kind {
		return c, fmt.Errorf("source %s is of kind %s, not %s", s.Name, s.Kind, kind)
	}
	if err := json.Unmarshal(s.Config, &c); err != nil {
		return c, fmt.Errorf("source %s: read configuration: %w", s.Name, err)
	}
	return c, nil
}

// without drops the field errors on field from a joined error.
func without(err error, field string) error {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var kept []error
	for _, e := range errs {
		if fe, ok := e.(*lifecycle.FieldError); !ok || fe.Field != field {
			kept = append(kept, e)
		}
	}
	return errors.Join(kept...)
}

// The bounds of the durations every kind has.
const (
	minInterval = 10 * time.Millisecond
	maxInterval = time.Hour
)

// DefaultContentType is the content type of a source's messages when its
// configuration gives none.
const DefaultContentType = "application/octet-stream"

// checkDuration fills d with def when it is zero and checks it is from lo
// to hi.
func checkDuration(field string, d *lifecycle.Duration, def, lo, hi time.Duration) error {
	if *d == 0 {
		*d = lifecycle.Duration(def)
	}
	if d.D() < lo || d.D() > hi {
		return &lifecycle.FieldError{Field: "config." + field,
			Problem: fmt.Sprintf("must be from %s to %s, got %s", lo, hi, d.D())}
	}
	return nil
}

// checkContentType fills ct with DefaultContentType when it is empty and
// checks it as a message's content type is checked.
func checkContentType(ct *string) error {
	if *ct == "" {
		*ct = DefaultContentType
	}
	return lifecycle.CheckParty("config.content_type", *ct)
}

// checkStamp checks the type and headers a polled source gives every
// message (lifecycle.CheckMessageType, lifecycle.LowerHeaders), and keeps
// the headers' names lower case.
func checkStamp(typ string, headers *map[string]string) error {
	lower, err := lifecycle.LowerHeaders("config.headers", *headers)
	if err == nil {
		*headers = lower
	}
	return errors.Join(lifecycle.CheckMessageType("config.type", typ), err)
}
