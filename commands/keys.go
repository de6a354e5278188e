package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/targets"
)

// The bounds of a rotation's grace, during which the keys it retires
// still sign beside the new one.
const (
	DefaultKeyGrace = 24 * time.Hour
	MaxKeyGrace     = 7 * 24 * time.Hour
)

// ownKeys caches, in one configuration read, the keys that sign
// Waybill's own requests, by owner: a rotation or a new key changes the
// configuration's version, so the next read of the configuration reads
// them again.
type ownKeys struct {
	mu   sync.Mutex
	keys map[string][]targets.Key
}

// RotateTargetKey gives a target that signs a new key (the one given in
// text form, checked as one given on creation, or a new one of the
// target's scheme) and lets its keys that sign now go on signing for
// grace (0 to MaxKeyGrace; a key ending sooner keeps its end), so a
// receiver has time to take the new key. It returns the new key.
// ErrNotFound for an unknown target; a *lifecycle.FieldError for a
// target that does not sign, a grace out of bounds or a wrong key;
// ErrTooManyKeys when more than targets.MaxLiveKeys would sign at once.
func (w *Writer) RotateTargetKey(ctx context.Context, name string, grace time.Duration, key string, actor string) (targets.Key, error) {
	k, err := w.rotateKey(ctx, name, grace, key, actor)
	if err != nil {
		return k, fmt.Errorf("rotate the key of target %s: %w", name, err)
	}
	return k, nil
}

// RotateOwnKey rotates Waybill's own key of owner (lifecycle.KeyOwners:
// the callbacks' or the alert webhook's) as RotateTargetKey rotates a
// target's, its scheme the settings'.
func (w *Writer) RotateOwnKey(ctx context.Context, owner string, grace time.Duration, key string, actor string) (targets.Key, error) {
	k, err := w.rotateKey(ctx, owner, grace, key, actor)
	if err != nil {
		return k, fmt.Errorf("rotate the key of %s: %w", owner, err)
	}
	return k, nil
}

func (w *Writer) rotateKey(ctx context.Context, owner string, grace time.Duration, given string, actor string) (targets.Key, error) {
	if grace < 0 || grace > MaxKeyGrace {
		return targets.Key{}, invalid(&lifecycle.FieldError{Field: "grace",
			Problem: fmt.Sprintf("%s: must be from 0s to %s", grace, MaxKeyGrace)})
	}
	if w.secrets == nil {
		return targets.Key{}, ErrNoSecrets
	}
	var key targets.Key
	err := w.changeConfig(ctx, actor, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		scheme, err := c.keyScheme(owner)
		if err != nil {
			return nil, nil, err
		}
		if scheme == targets.SchemeNone {
			return nil, nil, invalid(&lifecycle.FieldError{Field: schemeField(owner),
				Problem: `is "none": nothing is signed, so there is no key to rotate`})
		}
		// Read after the configuration's version: a key written since
		// moved the version, and this command's append then fails.
		live, err := targets.LoadKeys(ctx, w.db, w.secrets, owner, now)
		if err != nil {
			return nil, nil, err
		}
		if key, err = targets.NewKey(scheme, given, now); err != nil {
			return nil, nil, invalid(renameField(err, "signing.key", "key"))
		}
		if slices.ContainsFunc(live, func(k targets.Key) bool { return k.Fingerprint() == key.Fingerprint() }) {
			return nil, nil, invalid(&lifecycle.FieldError{Field: "key", Problem: "is a key that signs already: give a new one"})
		}
		end := now.Add(grace)
		retired := make([]journal.RetiredKey, 0, len(live))
		ids := []string{}
		for _, k := range live {
			r := journal.RetiredKey{KeyID: k.ID, ExpiresAt: end}
			if !k.ExpiresAt.IsZero() && k.ExpiresAt.Before(end) {
				r.ExpiresAt = k.ExpiresAt
			}
			retired = append(retired, r)
			if r.ExpiresAt.After(now) {
				ids = append(ids, k.ID)
			}
		}
		ids = append(ids, key.ID)
		if len(ids) > targets.MaxLiveKeys {
			return nil, nil, fmt.Errorf("%w: %d keys would sign at once, at most %d may: rotate with a shorter grace, or when a grace ends",
				ErrTooManyKeys, len(ids), targets.MaxLiveKeys)
		}
		payloads, writes, err := c.rotationEvents(owner, key, retired, ids, now)
		if err != nil {
			return nil, nil, err
		}
		return payloads, func(b *pgx.Batch) {
			for _, r := range retired {
				targets.QueueEndKey(b, owner, r.KeyID, r.ExpiresAt)
			}
			targets.QueueInsertKey(b, w.secrets, owner, key)
			writes(b)
		}, nil
	})
	if err != nil {
		return targets.Key{}, err
	}
	return key, nil
}

// keyScheme is the scheme owner's keys are of: a target's signing scheme
// (none for a target of another kind), or the settings' for Waybill's own.
func (c *configState) keyScheme(owner string) (string, error) {
	switch owner {
	case lifecycle.KeyOwnerCallbacks:
		return c.settings.Callbacks.Signing.Scheme, nil
	case lifecycle.KeyOwnerAlerts:
		return c.settings.Alerts.Signing.Scheme, nil
	}
	t, ok := c.targets[owner]
	if !ok {
		return "", ErrNotFound
	}
	if !targets.Signs(t) {
		return targets.SchemeNone, nil
	}
	return t.Signing.Scheme, nil
}

// schemeField is the field that chooses owner's scheme.
func schemeField(owner string) string {
	switch owner {
	case lifecycle.KeyOwnerCallbacks:
		return "callbacks.signing.scheme"
	case lifecycle.KeyOwnerAlerts:
		return "alerts.signing.scheme"
	}
	return "signing.scheme"
}

// rotationEvents are the events of a rotation of owner's keys, and, for
// a target, the write of its definition, whose signing.keys become ids.
func (c *configState) rotationEvents(owner string, key targets.Key, retired []journal.RetiredKey, ids []string,
	now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
	if slices.Contains(lifecycle.KeyOwners, owner) {
		return []journal.Payload{&journal.SigningKeyRotated{Owner: owner, KeyID: key.ID, Scheme: key.Scheme,
			Fingerprint: key.Fingerprint(), Retired: retired}}, func(*pgx.Batch) {}, nil
	}
	t := c.targets[owner]
	signing := *t.Signing
	signing.Keys = ids
	t.Signing = &signing
	spec, err := json.Marshal(t)
	if err != nil {
		return nil, nil, err
	}
	return []journal.Payload{
			&journal.TargetKeyRotated{Target: owner, KeyID: key.ID, Scheme: key.Scheme, Fingerprint: key.Fingerprint(), Retired: retired},
			&journal.TargetUpdated{Target: t, ClusterLimits: true},
		}, func(b *pgx.Batch) {
			b.Queue(`UPDATE targets SET spec = $2, updated_at = $3 WHERE name = $1`, t.Name, spec, now)
		}, nil
}

// renameField gives a field error on from the field to instead.
func renameField(err error, from, to string) error {
	if fe, ok := err.(*lifecycle.FieldError); ok && fe.Field == from {
		return &lifecycle.FieldError{Field: to, Problem: fe.Problem}
	}
	return err
}

// OwnKeys returns the keys that sign Waybill's own requests of owner
// (lifecycle.KeyOwners) now, oldest first, opened; none when the
// settings' scheme for them is none. It makes the first key of the
// scheme when there is none (a first start, a change of the scheme, which
// ends the keys of the other scheme at once), once however many
// processes ask at the same time. It reads as dispatch does, from the
// cached configuration, so a rotation in another process is seen when
// that process's change reaches this one (Invalidate).
func (w *Writer) OwnKeys(ctx context.Context, owner string) ([]targets.Key, error) {
	if !slices.Contains(lifecycle.KeyOwners, owner) {
		return nil, fmt.Errorf("keys of %s: %w", owner, ErrNotFound)
	}
	for try := 0; ; try++ {
		c, err := w.config(ctx)
		if err != nil {
			return nil, err
		}
		scheme, _ := c.keyScheme(owner)
		if scheme == targets.SchemeNone {
			return nil, nil
		}
		c.own.mu.Lock()
		keys, ok := c.own.keys[owner]
		c.own.mu.Unlock()
		if ok {
			return keys, nil
		}
		if w.secrets == nil {
			return nil, ErrNoSecrets
		}
		if keys, err = targets.LoadKeys(ctx, w.db, w.secrets, owner, w.now()); err != nil {
			return nil, err
		}
		if slices.ContainsFunc(keys, func(k targets.Key) bool { return k.Scheme == scheme }) || try > 0 {
			c.own.mu.Lock()
			if c.own.keys == nil {
				c.own.keys = map[string][]targets.Key{}
			}
			c.own.keys[owner] = keys
			c.own.mu.Unlock()
			return keys, nil
		}
		if err := w.addOwnKey(ctx, owner); err != nil {
			return nil, fmt.Errorf("keys of %s: %w", owner, err)
		}
	}
}

// addOwnKey makes owner's key of the settings' scheme unless one signs
// already, ending the keys of another scheme at once.
func (w *Writer) addOwnKey(ctx context.Context, owner string) error {
	return w.changeConfig(ctx, journal.ActorSystem, func(c *configState, now time.Time) ([]journal.Payload, func(*pgx.Batch), error) {
		scheme, _ := c.keyScheme(owner)
		if scheme == targets.SchemeNone {
			return nil, nil, nil
		}
		// Read after the configuration's version, as rotateKey does: of
		// processes that race here, one appends and the others find its key.
		live, err := targets.LoadKeys(ctx, w.db, w.secrets, owner, now)
		if err != nil {
			return nil, nil, err
		}
		if slices.ContainsFunc(live, func(k targets.Key) bool { return k.Scheme == scheme }) {
			return nil, nil, nil
		}
		key, err := targets.NewKey(scheme, "", now)
		if err != nil {
			return nil, nil, err
		}
		var p journal.Payload = &journal.SigningKeyAdded{Owner: owner, KeyID: key.ID, Scheme: key.Scheme, Fingerprint: key.Fingerprint()}
		retired := make([]journal.RetiredKey, len(live))
		for i, k := range live {
			retired[i] = journal.RetiredKey{KeyID: k.ID, ExpiresAt: now}
		}
		if len(live) > 0 {
			p = &journal.SigningKeyRotated{Owner: owner, KeyID: key.ID, Scheme: key.Scheme, Fingerprint: key.Fingerprint(), Retired: retired}
		}
		return []journal.Payload{p}, func(b *pgx.Batch) {
			for _, r := range retired {
				targets.QueueEndKey(b, owner, r.KeyID, r.ExpiresAt)
			}
			targets.QueueInsertKey(b, w.secrets, owner, key)
		}, nil
	})
}
