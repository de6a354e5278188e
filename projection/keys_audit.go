package projection

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// foldKey follows the signing keys through the configuration events: a
// target's key is added by target.key_added and goes with its target;
// Waybill's own keys are added by signing.key_added; a rotation adds a
// key and sets the ends of those it retired.
func (f *Folded) foldKey(e journal.Event) {
	switch p := e.Payload.(type) {
	case *journal.TargetCreated:
		delete(f.keys, p.Target.Name)
	case *journal.TargetDeleted:
		delete(f.keys, p.Name)
	case *journal.TargetKeyAdded:
		f.addKey(targets.KeyRecord{Owner: p.Target, ID: p.KeyID, Scheme: p.Scheme, Fingerprint: p.Fingerprint}, nil)
	case *journal.TargetKeyRotated:
		f.addKey(targets.KeyRecord{Owner: p.Target, ID: p.KeyID, Scheme: p.Scheme, Fingerprint: p.Fingerprint}, p.Retired)
	case *journal.SigningKeyAdded:
		f.addKey(targets.KeyRecord{Owner: p.Owner, ID: p.KeyID, Scheme: p.Scheme, Fingerprint: p.Fingerprint}, nil)
	case *journal.SigningKeyRotated:
		f.addKey(targets.KeyRecord{Owner: p.Owner, ID: p.KeyID, Scheme: p.Scheme, Fingerprint: p.Fingerprint}, p.Retired)
	}
}

// addKey records r as its owner's, and the ends of the owner's keys that
// retired names.
func (f *Folded) addKey(r targets.KeyRecord, retired []journal.RetiredKey) {
	keys := f.keys[r.Owner]
	if keys == nil {
		keys = map[string]targets.KeyRecord{}
		f.keys[r.Owner] = keys
	}
	for _, old := range retired {
		if k, ok := keys[old.KeyID]; ok {
			k.ExpiresAt = old.ExpiresAt
			keys[old.KeyID] = k
		}
	}
	keys[r.ID] = r
}

// checkKeys holds the stored signing keys to the journal: every key
// stored must be one the journal added to its owner, with the same
// scheme, fingerprint and end, and every key the journal added to an
// owner that still exists must be stored.
func checkKeys(ctx context.Context, q journal.Querier, f *Folded) ([]Violation, error) {
	stored, err := targets.KeyRecords(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("audit keys: %w", err)
	}
	var out []Violation
	seen := map[[2]string]bool{}
	for _, r := range stored {
		seen[[2]string{r.Owner, r.ID}] = true
		want, ok := f.keys[r.Owner][r.ID]
		switch {
		case !ok:
			out = append(out, Violation{Problem: fmt.Sprintf("%s: signing key %s is stored, but the journal records no such key", ownerText(r.Owner), r.ID)})
		case !want.Same(r):
			out = append(out, Violation{Problem: fmt.Sprintf("%s: signing key %s is stored as %s %s ending %s, the journal records %s %s ending %s",
				ownerText(r.Owner), r.ID, r.Scheme, r.Fingerprint, end(r), want.Scheme, want.Fingerprint, end(want))})
		}
	}
	for _, owner := range slices.Sorted(maps.Keys(f.keys)) {
		for _, id := range slices.Sorted(maps.Keys(f.keys[owner])) {
			if !seen[[2]string{owner, id}] {
				out = append(out, Violation{Problem: fmt.Sprintf("%s: the journal records signing key %s, which is not stored", ownerText(owner), id)})
			}
		}
	}
	return out, nil
}

// end is a key's end in a violation's words.
func end(r targets.KeyRecord) string {
	if r.ExpiresAt.IsZero() {
		return "never"
	}
	return r.ExpiresAt.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
}

// ownerText names a key's owner in a violation: a target, or a reserved
// owner as it is.
func ownerText(owner string) string {
	if slices.Contains(lifecycle.KeyOwners, owner) {
		return owner
	}
	return "target " + owner
}
