package service_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/waybill/waybill/service"
)

type fake struct {
	name string
	log  *[]string
	fail bool
}

func (f *fake) Start(context.Context) error {
	if f.fail {
		return errors.New("no")
	}
	*f.log = append(*f.log, "start "+f.name)
	return nil
}

func (f *fake) Stop(context.Context) { *f.log = append(*f.log, "stop "+f.name) }

func TestListStopsInReverseWhatStarted(t *testing.T) {
	var log []string
	var l service.List
	for _, name := range []string{"a", "b"} {
		if err := l.Start(t.Context(), name, &fake{name: name, log: &log}); err != nil {
			t.Fatal(err)
		}
	}
	err := l.Start(t.Context(), "c", &fake{name: "c", log: &log, fail: true})
	if err == nil || err.Error() != "start c: no" {
		t.Fatalf("failed start: %v", err)
	}
	l.Stop(t.Context())
	l.Stop(t.Context())
	if want := []string{"start a", "start b", "stop b", "stop a"}; !slices.Equal(log, want) {
		t.Errorf("got %v, want %v", log, want)
	}
}

func TestBaseDefaults(t *testing.T) {
	b := service.Base{}.WithDefaults()
	if b.Now == nil || b.Logger == nil {
		t.Errorf("defaults not filled: %+v", b)
	}
}
