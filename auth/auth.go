// Package auth holds the API's bearer tokens: each has a name, the subject
// an operator's actions are journaled under, and a role that bounds what it
// may do. Tokens are stored hashed and compared in constant time.
package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// Role bounds what a token may do.
type Role string

// The roles.
const (
	// RoleAdmin may change routes, targets and settings, act on messages,
	// post messages and read.
	RoleAdmin Role = "admin"
	// RoleIngest may only post messages.
	RoleIngest Role = "ingest"
	// RoleReader may only read.
	RoleReader Role = "reader"
	// RoleReceipt may only post receipts, so a receiver that confirms its
	// deliveries later holds no more than it needs: it reads nothing but
	// the answer to its receipt, the delivery it settled.
	RoleReceipt Role = "receipt"
)

// Roles is the canonical set.
var Roles = []Role{RoleAdmin, RoleIngest, RoleReader, RoleReceipt}

// ParseRole returns s as a role, or an error listing the roles.
func ParseRole(s string) (Role, error) {
	names := make([]string, len(Roles))
	for i, r := range Roles {
		if string(r) == s {
			return r, nil
		}
		names[i] = string(r)
	}
	return "", fmt.Errorf("%q is not a role: allowed are %s", s, strings.Join(names, ", "))
}

// Permission is one kind of request.
type Permission int

// The permissions a request needs.
const (
	// Read: every GET of the API.
	Read Permission = iota
	// Ingest: posting a message.
	Ingest
	// Confirm: posting a receipt for a delivery.
	Confirm
	// Administer: configuration and operator actions on messages.
	Administer
)

// Allows reports whether the role may do what p names.
func (r Role) Allows(p Permission) bool {
	switch r {
	case RoleAdmin:
		return true
	case RoleIngest:
		return p == Ingest
	case RoleReader:
		return p == Read
	case RoleReceipt:
		return p == Confirm
	}
	return false
}

// Identity is who a request acts as.
type Identity struct {
	// Name is the token's name: the operator's subject in the journal.
	Name string
	Role Role
	// Scope bounds what the token reaches; nil for a token that reaches
	// all its role allows.
	Scope *Scope
}

// Scope bounds a token to some sources (ingest and reader tokens) or some
// targets (receipt tokens). An admin token is never scoped.
type Scope struct {
	// Sources are the sources whose messages the token may post or read.
	Sources []string
	// Targets are the targets whose deliveries the token may settle.
	Targets []string
}

// Source reports whether the identity reaches the messages of source.
func (id Identity) Source(source string) bool {
	return id.Scope == nil || slices.Contains(id.Scope.Sources, source)
}

// Target reports whether the identity may settle deliveries to target.
func (id Identity) Target(target string) bool {
	return id.Scope == nil || slices.Contains(id.Scope.Targets, target)
}

// CheckScope checks that role takes scope: sources for ingest and reader
// tokens, targets for receipt tokens, nothing for admin tokens; and that
// each name is a name. A nil scope is always right. Problems are
// *lifecycle.FieldErrors on the fields sources and targets.
func CheckScope(role Role, scope *Scope) error {
	if scope == nil {
		return nil
	}
	takes := map[Role]string{RoleIngest: "sources", RoleReader: "sources", RoleReceipt: "targets"}[role]
	var errs []error
	for _, f := range []struct {
		field string
		names []string
	}{{"sources", scope.Sources}, {"targets", scope.Targets}} {
		switch {
		case f.names == nil:
		case f.field != takes:
			errs = append(errs, &lifecycle.FieldError{Field: f.field, Problem: fmt.Sprintf(
				"a token of role %s takes no %s: sources bound ingest and reader tokens, targets bound receipt tokens, and admin tokens are never bound", role, f.field)})
		case len(f.names) == 0:
			errs = append(errs, &lifecycle.FieldError{Field: f.field, Problem: "must name at least one"})
		default:
			for i, n := range f.names {
				if err := lifecycle.CheckName(fmt.Sprintf("%s[%d]", f.field, i), n); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if len(errs) == 0 && scope.Sources == nil && scope.Targets == nil {
		errs = append(errs, &lifecycle.FieldError{Field: map[bool]string{true: "sources", false: "targets"}[takes != "targets"],
			Problem: "a scope must name at least one"})
	}
	return errors.Join(errs...)
}

// ParseLifetime reads how long a token lasts: a Go duration ("720h",
// "90m") or a whole number of days ("90d"), more than zero.
func ParseLifetime(s string) (time.Duration, error) {
	d, err := lifecycle.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a lifetime, which must be more than zero: give a number of days such as 90d, or a Go duration such as 12h", s)
	}
	return d, nil
}

// ErrUnauthorized: no token, or one that is not known.
var ErrUnauthorized = errors.New("unauthorized")

// SplitNames reads a scope written as a comma-separated list of names, as
// the command line and the console take it; nil for an empty one, which
// leaves a token unscoped. CheckScope checks the names.
func SplitNames(s string) []string {
	if s == "" {
		return nil
	}
	names := strings.Split(s, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	return names
}
