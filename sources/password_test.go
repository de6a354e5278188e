package sources_test

import (
	"strings"
	"testing"

	"github.com/waybill/waybill/sources"
)

func TestMaskPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://waybill:s3cret@db:5432/inbox?sslmode=disable", "postgres://waybill:xxxxx@db:5432/inbox?sslmode=disable"},
		{"postgresql://u:p%40ss@db/x", "postgresql://u:xxxxx@db/x"},
		{"postgres://u:p@ss@db/x", "postgres://u:xxxxx@db/x"},
		{"postgres://u@db/x?password=s3cret&sslmode=require", "postgres://u@db/x?password=xxxxx&sslmode=require"},
		{"postgres://u:one@db/x?password=two", "postgres://u:xxxxx@db/x?password=xxxxx"},
		{"postgres://waybill@db/inbox", "postgres://waybill@db/inbox"},
		{"postgres://u:@db/x", "postgres://u:@db/x"},
		{"postgres://db/x?user=u", "postgres://db/x?user=u"},
		{"host=db user=u password=s3cret dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"host=db password = 's3 cr\\'et' dbname=x", "host=db password = xxxxx dbname=x"},
		{"password=s3cret", "password=xxxxx"},
		{"host=db mypassword=x dbname=x", "host=db mypassword=x dbname=x"},
		{"host=db dbname=x", "host=db dbname=x"},
		{"", ""},
	} {
		if got := sources.MaskPassword(tc.dsn); got != tc.want {
			t.Errorf("sources.MaskPassword(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
		if strings.Contains(tc.want, sources.PasswordMask) != sources.HoldsMask(tc.want) {
			t.Errorf("sources.HoldsMask(%q) = %t", tc.want, sources.HoldsMask(tc.want))
		}
	}
}
