package console

import (
	"encoding/json"

	"github.com/waybill/waybill/redact"
	"github.com/waybill/waybill/sources"
)

// showConfig is a source's configuration indented for a page, the
// password of its database_url masked. A configuration that is not a JSON
// object is shown as it is: it has no field to hide.
func showConfig(raw json.RawMessage) string {
	masked, _ := redact.SourceConfig(raw)
	return indent(masked)
}

// keepPassword is the configuration an edit form sent, with its
// database_url put back as it is stored when the form left it as the page
// showed it (masked). A database_url changed but still holding the mask is
// refused: its password is unknown.
func keepPassword(sent, stored json.RawMessage) (json.RawMessage, error) {
	var fields, was map[string]json.RawMessage
	var dsn, storedDSN string
	if json.Unmarshal(sent, &fields) != nil || json.Unmarshal(fields[sources.DatabaseURLField], &dsn) != nil {
		return sent, nil // the kind's check names what is wrong
	}
	if json.Unmarshal(stored, &was) == nil && json.Unmarshal(was[sources.DatabaseURLField], &storedDSN) == nil &&
		storedDSN != dsn && redact.DSN(storedDSN) == dsn {
		fields[sources.DatabaseURLField] = was[sources.DatabaseURLField]
		return json.Marshal(fields)
	}
	if redact.HoldsMask(dsn) {
		return sent, invalidField("config."+sources.DatabaseURLField, "holds the hidden password "+redact.Mask+
			": to keep the stored connection leave it as it was shown; to change it, write it whole, with its password")
	}
	return sent, nil
}
