package redact

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/sources"
)

// Mask stands for a secret a caller is not shown.
const Mask = "***"

// Hides reports whether a caller of the role is shown the configuration
// masked: every role but one that may administer, which writes the
// definitions and so knows their secrets.
func Hides(role auth.Role) bool { return !role.Allows(auth.Administer) }

// The fields of a target's configuration that hold secrets, whatever its
// kind: each value of headers, the password of url.
const (
	headersField = "headers"
	urlField     = "url"
)

// Target is t with the values of its configuration's headers and its
// URL's password masked. A configuration that is not a JSON object comes
// back as it is: it has no field to hide.
func Target(t lifecycle.Target) lifecycle.Target {
	t.Config = editObject(t.Config, func(key string, value json.RawMessage) json.RawMessage {
		switch key {
		case headersField:
			return editObject(value, func(string, json.RawMessage) json.RawMessage { return maskJSON })
		case urlField:
			var u string
			if json.Unmarshal(value, &u) == nil {
				if masked := URL(u); masked != u {
					return mustJSON(masked)
				}
			}
		}
		return value
	})
	return t
}

// Targets is each of ts masked as Target masks it, in a new slice.
func Targets(ts []lifecycle.Target) []lifecycle.Target {
	out := make([]lifecycle.Target, len(ts))
	for i, t := range ts {
		out[i] = Target(t)
	}
	return out
}

// SourceConfig is a source's configuration with the passwords of its
// database_url masked (DSN) and each secret of its verify (a webhook
// source's) masked, and whether there was one to mask. A configuration
// that is not a JSON object, or has no secret, comes back as it is.
func SourceConfig(raw json.RawMessage) (json.RawMessage, bool) {
	masked := false
	out := editObject(raw, func(key string, value json.RawMessage) json.RawMessage {
		if key == sources.VerifyField {
			return editObject(value, func(key string, value json.RawMessage) json.RawMessage {
				switch key {
				case sources.SecretField:
					masked = true
					return maskJSON
				case sources.SecretsField:
					masked = true
					var secrets []json.RawMessage
					if json.Unmarshal(value, &secrets) != nil {
						return maskJSON
					}
					masks := make([]string, len(secrets))
					for i := range masks {
						masks[i] = Mask
					}
					b, _ := json.Marshal(masks) // strings always encode
					return b
				}
				return value
			})
		}
		var dsn string
		if key != sources.DatabaseURLField || json.Unmarshal(value, &dsn) != nil || DSN(dsn) == dsn {
			return value
		}
		masked = true
		return mustJSON(DSN(dsn))
	})
	if !masked {
		return raw, false
	}
	return out, true
}

// Shape is s with the values of the headers a target's transform set
// masked: they are sent over the target's own headers, so may stand for
// them.
func Shape(s journal.Shape) journal.Shape {
	if len(s.Headers) == 0 {
		return s
	}
	masked := make(map[string]string, len(s.Headers))
	for name := range s.Headers {
		masked[name] = Mask
	}
	s.Headers = masked
	return s
}

// shapes is nd with the shapes of its deliveries masked (Shape), in a
// new slice.
func shapes(nd journal.NewDeliveries) journal.NewDeliveries {
	nd.Deliveries = slices.Clone(nd.Deliveries)
	for i, d := range nd.Deliveries {
		if d.Shape != nil {
			masked := Shape(*d.Shape)
			nd.Deliveries[i].Shape = &masked
		}
	}
	return nd
}

// Payload is p with the secrets of a target's or a source's definition
// masked (Target, SourceConfig), the values of the headers its transform
// set on each delivery it makes (Shape), and a message's W3C baggage,
// whose members are the sender's own (a user, a tenant, a token), masked
// whole, for readers of the journal who do not write the definitions; any
// other payload comes back as it is.
func Payload(p journal.Payload) journal.Payload {
	switch p := p.(type) {
	case *journal.MessageDispatched:
		return &journal.MessageDispatched{NewDeliveries: shapes(p.NewDeliveries)}
	case *journal.MessageRedispatched:
		masked := *p
		masked.NewDeliveries = shapes(p.NewDeliveries)
		return &masked
	case *journal.MessageResent:
		masked := *p
		masked.NewDeliveries = shapes(p.NewDeliveries)
		return &masked
	case *journal.MessageAccepted:
		if p.Baggage == "" {
			return p
		}
		masked := *p
		masked.Baggage = Mask
		return &masked
	case *journal.TargetCreated:
		return &journal.TargetCreated{Target: Target(p.Target), ClusterLimits: p.ClusterLimits}
	case *journal.TargetUpdated:
		return &journal.TargetUpdated{Target: Target(p.Target), ClusterLimits: p.ClusterLimits}
	case *journal.SourceCreated:
		masked := *p
		masked.Source.Config, _ = SourceConfig(p.Source.Config)
		return &masked
	case *journal.SourceUpdated:
		masked := *p
		masked.Source.Config, _ = SourceConfig(p.Source.Config)
		return &masked
	}
	return p
}

var maskJSON = mustJSON(Mask)

func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

// editObject is the JSON object raw with each member's value replaced by
// what edit returns for it, the members in their order. Anything but an
// object comes back as it is.
func editObject(raw json.RawMessage, edit func(key string, value json.RawMessage) json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return raw
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		var value json.RawMessage
		if err != nil || !ok || dec.Decode(&value) != nil {
			return raw
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(mustJSON(key))
		b.WriteByte(':')
		b.Write(edit(key, value))
	}
	b.WriteByte('}')
	return b.Bytes()
}
