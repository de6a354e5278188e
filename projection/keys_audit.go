package projection

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/targets"
)

// foldKey follows the targets' signing keys through the configuration
// events: a key is added by target.key_added and goes with its target.
func (f *Folded) foldKey(e journal.Event) {
	switch p := e.Payload.(type) {
	case *journal.TargetCreated:
		delete(f.keys, p.Target.Name)
	case *journal.TargetDeleted:
		delete(f.keys, p.Name)
	case *journal.TargetKeyAdded:
		if f.keys[p.Target] == nil {
			f.keys[p.Target] = map[string]targets.KeyRecord{}
		}
		f.keys[p.Target][p.KeyID] = targets.KeyRecord{Target: p.Target, ID: p.KeyID, Scheme: p.Scheme, Fingerprint: p.Fingerprint}
	}
}

// checkKeys holds the stored signing keys to the journal: every key
// stored must be one the journal added to its target, with the same
// scheme and fingerprint, and every key the journal added to a target
// that still exists must be stored.
func checkKeys(ctx context.Context, q journal.Querier, f *Folded) ([]Violation, error) {
	stored, err := targets.KeyRecords(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("audit keys: %w", err)
	}
	var out []Violation
	seen := map[[2]string]bool{}
	for _, r := range stored {
		seen[[2]string{r.Target, r.ID}] = true
		want, ok := f.keys[r.Target][r.ID]
		switch {
		case !ok:
			out = append(out, Violation{Problem: fmt.Sprintf("target %s: signing key %s is stored, but the journal records no such key", r.Target, r.ID)})
		case want != r:
			out = append(out, Violation{Problem: fmt.Sprintf("target %s: signing key %s is stored as %s %s, the journal records %s %s",
				r.Target, r.ID, r.Scheme, r.Fingerprint, want.Scheme, want.Fingerprint)})
		}
	}
	for _, target := range slices.Sorted(maps.Keys(f.keys)) {
		for _, id := range slices.Sorted(maps.Keys(f.keys[target])) {
			if !seen[[2]string{target, id}] {
				out = append(out, Violation{Problem: fmt.Sprintf("target %s: the journal records signing key %s, which is not stored", target, id)})
			}
		}
	}
	return out, nil
}
