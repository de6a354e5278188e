package auth_test

import (
	"testing"

	"github.com/waybill/waybill/auth"
)

// TestRolesAllow is the matrix of roles and permissions: admin may do
// everything, every other role exactly one thing.
func TestRolesAllow(t *testing.T) {
	t.Parallel()
	permissions := []auth.Permission{auth.Read, auth.Ingest, auth.Confirm, auth.Administer}
	for _, c := range []struct {
		role  auth.Role
		allow []bool // read, ingest, confirm, administer
	}{
		{auth.RoleAdmin, []bool{true, true, true, true}},
		{auth.RoleIngest, []bool{false, true, false, false}},
		{auth.RoleReader, []bool{true, false, false, false}},
		{auth.RoleReceipt, []bool{false, false, true, false}},
		{auth.Role("root"), []bool{false, false, false, false}},
	} {
		for i, p := range permissions {
			if got := c.role.Allows(p); got != c.allow[i] {
				t.Errorf("%s allows permission %d: %v, want %v", c.role, p, got, c.allow[i])
			}
		}
	}
}

func TestParseRole(t *testing.T) {
	t.Parallel()
	for _, r := range auth.Roles {
		if got, err := auth.ParseRole(string(r)); got != r || err != nil {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	if _, err := auth.ParseRole("Admin"); err == nil || err.Error() != `"Admin" is not a role: allowed are admin, ingest, reader, receipt` {
		t.Errorf("ParseRole(Admin): %v", err)
	}
}
