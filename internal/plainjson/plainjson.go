// Package plainjson encodes the JSON Waybill emits (the API's answers, the
// journal's payloads, the event stream, the alerts, the callbacks) in one
// way: <, > and & stay as they are. The standard library escapes them for
// HTML, which no reader of these documents needs, and a message would read
// "Bearer \u003ctoken\u003e".
package plainjson

import (
	"bytes"
	"encoding/json"
)

// Marshal is json.Marshal without the escaping of <, > and & for HTML.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
