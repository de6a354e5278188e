package console

import (
	"encoding/json"
	"fmt"

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

// keepSecrets is the configuration an edit form sent with every secret
// the page showed masked put back as stored: the password of its
// database_url (keepPassword), and each secret of a webhook source's
// verify left as Mask, which stands for the stored secret at its place in
// the list. A Mask with no stored secret at its place is refused.
func keepSecrets(sent, stored json.RawMessage) (json.RawMessage, error) {
	sent, err := keepPassword(sent, stored)
	if err != nil {
		return sent, err
	}
	var fields, verify map[string]json.RawMessage
	if json.Unmarshal(sent, &fields) != nil || json.Unmarshal(fields[sources.VerifyField], &verify) != nil || verify == nil {
		return sent, nil // the kind's check names what is wrong
	}
	var was struct {
		Verify struct {
			Secrets []string `json:"secrets"`
		} `json:"verify"`
	}
	_ = json.Unmarshal(stored, &was) // none stored: a Mask is refused below
	restore := func(field string, i int, s *string) error {
		if *s != redact.Mask {
			return nil
		}
		if i >= len(was.Verify.Secrets) {
			return invalidField("config."+sources.VerifyField+"."+field, "holds the hidden secret "+redact.Mask+
				" where no secret is stored: write the secret whole")
		}
		*s = was.Verify.Secrets[i]
		return nil
	}
	changed := false
	for _, field := range []string{sources.SecretField, sources.SecretsField} {
		raw, ok := verify[field]
		if !ok {
			continue
		}
		var one string
		var many []string
		switch {
		case field == sources.SecretField && json.Unmarshal(raw, &one) == nil:
			if err := restore(field, 0, &one); err != nil {
				return sent, err
			}
			verify[field], _ = json.Marshal(one)
		case field == sources.SecretsField && json.Unmarshal(raw, &many) == nil:
			for i := range many {
				if err := restore(fmt.Sprintf("%s[%d]", field, i), i, &many[i]); err != nil {
					return sent, err
				}
			}
			verify[field], _ = json.Marshal(many)
		default:
			continue
		}
		changed = true
	}
	if !changed {
		return sent, nil
	}
	fields[sources.VerifyField], _ = json.Marshal(verify)
	return json.Marshal(fields)
}
