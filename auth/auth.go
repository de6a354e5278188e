// Package auth holds the API's bearer tokens: each has a name, the subject
// an operator's actions are journaled under, and a role that bounds what it
// may do. Tokens are stored hashed and compared in constant time.
package auth

import (
	"errors"
	"fmt"
	"strings"
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
}

// ErrUnauthorized: no token, or one that is not known.
var ErrUnauthorized = errors.New("unauthorized")
