package feed

import (
	"errors"
	"testing"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

func TestTheFeedNeverWritesTheJournal(t *testing.T) {
	if _, err := (journalSchema{}).InsertQuery(wsql.InsertQueryParams{Topic: topic}); !errors.Is(err, errReadOnly) {
		t.Fatalf("InsertQuery: %v", err)
	}
	qs, err := (journalSchema{}).SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
	if err != nil || len(qs) != 1 {
		t.Fatalf("initializing queries %v, %v: want only the lock", qs, err)
	}
}
